// The emulator's C interface to Go (emu_runtime.cc).
#ifndef CHAINEDSQL_EMU_H
#define CHAINEDSQL_EMU_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
// emu_find returns the index of the kernel called name, or -1.
int emu_find(const char *name);
int emu_count(void);
const char *emu_name(int k);
// emu_run runs blocks first, first+step, ... of a launch of kernel k (parameters in slots) on
// the calling thread; 0, or 1 with a message in err.
int emu_run(int k, uint64_t *slots, int nargs, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
            unsigned bz, unsigned shared, long first, long step, char *err, int errlen);
// Memory, addressed by integers (device addresses on the Go side).
uint64_t emu_alloc(uint64_t n);
void emu_free(uint64_t p);
int emu_canary_ok(uint64_t p, uint64_t n);
void emu_copy_in(uint64_t dst, const void *src, uint64_t n);
void emu_copy_out(void *dst, uint64_t src, uint64_t n);
void emu_copy(uint64_t dst, uint64_t src, uint64_t n);
void emu_zero(uint64_t dst, uint64_t n);
#ifdef __cplusplus
}
#endif
#endif
