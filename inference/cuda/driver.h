// The few NVIDIA driver API (libcuda) and cuBLAS entry points the backend calls, declared here
// rather than taken from cuda.h so that building needs no CUDA toolkit; the libraries are opened
// with dlopen at run time (driver.c).
#ifndef CHAINEDSQL_CUDA_DRIVER_H
#define CHAINEDSQL_CUDA_DRIVER_H
#include <stddef.h>
#include <stdint.h>

typedef int cu_result;
typedef unsigned long long cu_ptr;

// cud_open loads the driver library at path (NULL: libcuda.so.1) and resolves every symbol.
// It returns 0, or 1 with a message in err (no library or a symbol missing: a driver too old).
int cud_open(const char *path, char *err, int errlen);
// cud_init runs cuInit, counts devices and, for device 0, fills name, compute capability,
// multiprocessor count, total memory and the driver's CUDA version. It returns the CUresult.
cu_result cud_init(int *count, int *version, char *name, int namelen, int *major, int *minor, int *sms, size_t *mem);
// cud_error_text names a CUresult ("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected").
void cud_error_text(cu_result r, char *buf, int len);

// cud_ctx retains device 0's primary context and creates a non-blocking stream on it.
cu_result cud_ctx(void **ctx, void **stream);
// cud_close unloads mod, destroys stream and releases the primary context.
cu_result cud_close(void *ctx, void *stream, void *mod);
cu_result cud_module(void *ctx, const char *ptx, void **mod, char *log, int loglen);
cu_result cud_func(void *ctx, void *mod, const char *name, void **fn);
cu_result cud_alloc(void *ctx, cu_ptr *p, size_t n);
cu_result cud_free(void *ctx, cu_ptr p);
cu_result cud_htod(void *ctx, void *stream, cu_ptr dst, const void *src, size_t n);
cu_result cud_dtoh(void *ctx, void *stream, void *dst, cu_ptr src, size_t n);
// cud_dtod queues a copy of n bytes from src to dst (both device memory) on stream.
cu_result cud_dtod(void *ctx, void *stream, cu_ptr dst, cu_ptr src, size_t n);
cu_result cud_zero(void *ctx, void *stream, cu_ptr dst, size_t n);
cu_result cud_sync(void *ctx, void *stream);
// cud_launch launches fn with nargs parameters, parameter i read from slots[i].
cu_result cud_launch(void *ctx, void *stream, void *fn, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned shared, uint64_t *slots, int nargs);
cu_result cud_set_shared(void *ctx, void *fn, int bytes);
cu_result cud_begin_capture(void *ctx, void *stream);
cu_result cud_end_capture(void *ctx, void *stream, void **exec);
cu_result cud_graph_launch(void *ctx, void *stream, void *exec);
cu_result cud_graph_destroy(void *ctx, void *exec);
cu_result cud_mem_info(void *ctx, size_t *free_bytes, size_t *total);

// cublas_open loads libcublas (path, else the newest of .so.13, .so.12 and .so.11 that the
// driver's CUDA major version supports and that creates a handle) and creates a handle on
// stream with the workspace given; 0 on success with the library's name in which.
int cublas_open(void *ctx, void *stream, const char *path, int driver_major, cu_ptr workspace, size_t wsbytes, void **handle,
                char *which, int whichlen, char *err, int errlen);
// cublas_gemm_bf16: see Device.Gemm. Returns the cublasStatus.
int cublas_gemm_bf16(void *ctx, void *handle, int N, int T, int K, cu_ptr w, cu_ptr x, cu_ptr out, int ldo, float beta);
void cublas_close(void *ctx, void *handle);
#endif
