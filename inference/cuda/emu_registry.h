// The emulator's kernel table: REGISTER(name) after a kernel's definition adds it, with a
// caller that unpacks the launch's parameter slots into the kernel's typed parameters (what
// cuLaunchKernel does for a real device).
#ifndef CHAINEDSQL_EMU_REGISTRY_H
#define CHAINEDSQL_EMU_REGISTRY_H
#include <stddef.h>
#include <type_traits>
#include <utility>

typedef void (*emu_caller)(void *fn, void **args);

struct emu_kernel {
	const char *name;
	void *fn;
	emu_caller call;
};

// emu_register adds a kernel to the table (at static initialisation).
int emu_register(const char *name, void *fn, emu_caller call);

template <typename... A, size_t... I>
static void emu_call_impl(void (*f)(A...), void **args, std::index_sequence<I...>) {
	f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>> *>(args[I])...);
}

template <typename... A> struct emu_sig {
	static void call(void *fn, void **args) {
		emu_call_impl(reinterpret_cast<void (*)(A...)>(fn), args, std::index_sequence_for<A...>{});
	}
};

template <typename... A> static emu_caller emu_caller_of(void (*)(A...)) { return &emu_sig<A...>::call; }

#define REGISTER(name) \
	static int emu_reg_##name = emu_register(#name, reinterpret_cast<void *>(&name), emu_caller_of(&name))

#endif
