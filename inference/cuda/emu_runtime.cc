//go:build cudaemu

// The emulator's execution model (see cudaemu.h). A block's threads are fibers on the calling OS
// thread: the scheduler resumes each ready fiber in turn; a fiber runs until it reaches a
// barrier (__syncthreads), a warp operation (shuffle, vote, __syncwarp) or its end. A block
// barrier releases once every live thread of the block waits at one, a warp operation once
// every live lane of the warp does (exited threads hold neither up, as on the hardware). Threads
// that wait where no release can come (lanes of a warp split between a barrier and a warp
// operation, lanes at different warp operations) are reported as a deadlock instead of hanging. Written by hand rather than taken from a library because it must reproduce CUDA's
// barrier and warp semantics exactly and fast enough for whole forward passes on the CPU: a
// fiber switch is a few instructions (an assembly stack swap on x86-64; ucontext elsewhere).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>
#include <string>
#include <vector>

#include "cudaemu.h"
#include "emu_registry.h"
#include "emu.h"

thread_local dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;
thread_local void *emu_dyn_shared;

// ---- kernel table ----

static std::vector<emu_kernel> &table() {
	static std::vector<emu_kernel> t;
	return t;
}

int emu_register(const char *name, void *fn, emu_caller call) {
	table().push_back(emu_kernel{name, fn, call});
	return (int)table().size();
}

extern "C" int emu_find(const char *name) {
	for (size_t i = 0; i < table().size(); i++)
		if (strcmp(table()[i].name, name) == 0)
			return (int)i;
	return -1;
}

extern "C" int emu_count(void) { return (int)table().size(); }
extern "C" const char *emu_name(int k) { return table()[k].name; }

// ---- context switch ----

#if defined(__x86_64__)
extern "C" void chainedsql_emu_swap(void **save, void *next);
extern "C" void chainedsql_emu_trampoline(void);
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save,
// and resumes the stack next (a frame saved the same way, or a new fiber's initial frame, whose
// return address is the trampoline). MXCSR and the x87 control word are not switched: every
// fiber of a thread runs with the thread's, and kernels do not change them.
asm(R"(
	.text
	.globl chainedsql_emu_swap
	.hidden chainedsql_emu_swap
	.type chainedsql_emu_swap,@function
chainedsql_emu_swap:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size chainedsql_emu_swap, .-chainedsql_emu_swap

	.globl chainedsql_emu_trampoline
	.hidden chainedsql_emu_trampoline
	.type chainedsql_emu_trampoline,@function
chainedsql_emu_trampoline:
	movq %r12, %rdi
	call *%r13
	ud2
	.size chainedsql_emu_trampoline, .-chainedsql_emu_trampoline
	.section .note.GNU-stack,"",@progbits
	.text
)");
#else
#include <ucontext.h>
#endif

enum { READY, AT_BLOCK, AT_WARP, DONE };

struct Fiber {
	void *sp;
#if !defined(__x86_64__)
	ucontext_t uc;
#endif
	char *stack;
	int state;
	unsigned wgen; // warp operations passed
};

struct Warp {
	uint64_t buf[2][32];     // values posted at a warp operation, by parity of its generation
	unsigned live[2];        // lanes alive when that operation released
	uint32_t frag[2][32][6]; // each lane's a and b fragments posted at an mma, by the same parity
};

static const size_t kStack = 64 << 10;
static const size_t kGuard = 4096;
static const int kMaxThreads = 1024;

// Runner holds the fibers and stacks one OS thread uses to run blocks; runners are pooled.
struct Runner {
	std::vector<Fiber> f;
	std::vector<Warp> w;
	char *stacks = nullptr;
	int nstacks = 0;
	std::vector<unsigned char> dyn;
	void *sched_sp = nullptr;
#if !defined(__x86_64__)
	ucontext_t sched_uc;
#endif
	int n = 0, cur = 0;
	void *fn = nullptr;
	emu_caller call = nullptr;
	void **args = nullptr;
	std::string err;

	bool ensure(int threads) {
		if (threads <= nstacks)
			return true;
		if (stacks)
			munmap(stacks, (size_t)nstacks * (kStack + kGuard));
		size_t size = (size_t)threads * (kStack + kGuard);
		void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			stacks = nullptr;
			nstacks = 0;
			return false;
		}
		stacks = (char *)m;
		for (int i = 0; i < threads; i++) // a guard page below each stack catches an overflow
			mprotect(stacks + (size_t)i * (kStack + kGuard), kGuard, PROT_NONE);
		nstacks = threads;
		f.resize(threads);
		for (int i = 0; i < threads; i++)
			f[i].stack = stacks + (size_t)i * (kStack + kGuard) + kGuard;
		return true;
	}
};

static std::mutex pool_mu;
static std::vector<Runner *> pool;

static Runner *get_runner() {
	std::lock_guard<std::mutex> g(pool_mu);
	if (pool.empty())
		return new Runner();
	Runner *r = pool.back();
	pool.pop_back();
	return r;
}

static void put_runner(Runner *r) {
	std::lock_guard<std::mutex> g(pool_mu);
	pool.push_back(r);
}

static thread_local Runner *cur_runner;

static inline void set_tid(int i);

// to_sched suspends fiber f: it resumes the next ready fiber of the scheduler's round directly
// (one switch instead of two through the scheduler), or the scheduler when there is none.
static inline void to_sched(Runner *r, Fiber *f) {
	int next = r->cur + 1;
	while (next < r->n && r->f[next].state != READY)
		next++;
#if defined(__x86_64__)
	if (next < r->n) {
		r->cur = next;
		set_tid(next);
		chainedsql_emu_swap(&f->sp, r->f[next].sp);
		return;
	}
	r->cur = r->n;
	chainedsql_emu_swap(&f->sp, r->sched_sp);
#else
	(void)next;
	swapcontext(&f->uc, &r->sched_uc);
#endif
}

static inline void to_fiber(Runner *r, Fiber *f) {
#if defined(__x86_64__)
	chainedsql_emu_swap(&r->sched_sp, f->sp);
#else
	swapcontext(&r->sched_uc, &f->uc);
#endif
}

static void fiber_main(Runner *r) {
	r->call(r->fn, r->args);
	Fiber *f = &r->f[r->cur];
	f->state = DONE;
	to_sched(r, f);
	abort(); // a finished fiber is never resumed
}

#if !defined(__x86_64__)
static void fiber_main_uc() { fiber_main(cur_runner); }
#endif

static void start_fiber(Runner *r, Fiber *f) {
	f->state = READY;
	f->wgen = 0;
#if defined(__x86_64__)
	// Stack tops are staggered by a cache line per fiber, so that the fibers' live frames do
	// not all fall into the same L1 sets (the stacks are a multiple of 4 KiB apart).
	int color = (int)(f - r->f.data()) % 48;
	uintptr_t top = ((uintptr_t)(f->stack + kStack - 64 * color)) & ~(uintptr_t)15;
	uint64_t *sp = (uint64_t *)(top - 72); // ≡ 8 mod 16: the trampoline starts 16-aligned
	sp[0] = 0;                                   // r15
	sp[1] = 0;                                   // r14
	sp[2] = (uint64_t)(uintptr_t)&fiber_main;     // r13: the function the trampoline calls
	sp[3] = (uint64_t)(uintptr_t)r;               // r12: its argument
	sp[4] = 0;                                   // rbx
	sp[5] = 0;                                   // rbp
	sp[6] = (uint64_t)(uintptr_t)&chainedsql_emu_trampoline;
	f->sp = sp;
#else
	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = kStack;
	f->uc.uc_link = nullptr;
	makecontext(&f->uc, fiber_main_uc, 0);
#endif
}

static inline void set_tid(int i) {
	unsigned bx = emu_block_dim.x, by = emu_block_dim.y;
	if (by == 1 && emu_block_dim.z == 1) { // the common 1-D block: no divisions
		emu_thread_idx.x = i;
		return;
	}
	emu_thread_idx.x = i % bx;
	emu_thread_idx.y = (i / bx) % by;
	emu_thread_idx.z = i / (bx * by);
}

static void fail(Runner *r, const char *msg) {
	if (r->err.empty())
		r->err = msg;
}

// run_block runs every thread of the current block to its end. It returns false on a deadlock
// or an error a thread reported (in r->err).
static bool run_block(Runner *r) {
	int n = r->n;
	for (int i = 0; i < n; i++)
		start_fiber(r, &r->f[i]);
	int nw = (n + 31) / 32;
	for (;;) {
#if defined(__x86_64__)
		// One pass over the ready fibers: the first is resumed here, each hands on to the next
		// (to_sched) and the last returns here.
		for (int i = 0; i < n; i++) {
			if (r->f[i].state == READY) {
				r->cur = i;
				set_tid(i);
				to_fiber(r, &r->f[i]);
				break;
			}
		}
#else
		for (int i = 0; i < n; i++) {
			Fiber *f = &r->f[i];
			if (f->state != READY)
				continue;
			r->cur = i;
			set_tid(i);
			to_fiber(r, f);
		}
#endif
		if (!r->err.empty())
			return false;
		int done = 0, at_block = 0;
		bool released = false;
		for (int w = 0; w < nw; w++) {
			int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
			unsigned live = 0;
			bool all_warp = true;
			int gen = -1;
			bool same_gen = true;
			for (int i = lo; i < hi; i++) {
				Fiber *f = &r->f[i];
				if (f->state == DONE) {
					done++;
					continue;
				}
				live |= 1u << (i - lo);
				if (f->state == AT_BLOCK)
					at_block++;
				if (f->state != AT_WARP) {
					all_warp = false;
				} else if (gen < 0) {
					gen = (int)f->wgen;
				} else if ((unsigned)gen != f->wgen) {
					same_gen = false;
				}
			}
			if (live && all_warp) {
				if (!same_gen) {
					fail(r, "lanes of one warp wait at different warp operations (divergent shuffle or vote)");
					return false;
				}
				r->w[w].live[gen & 1] = live;
				for (int i = lo; i < hi; i++)
					if (r->f[i].state == AT_WARP)
						r->f[i].state = READY;
				released = true;
			}
		}
		if (done == n)
			return true;
		if (released)
			continue;
		if (at_block == n - done) {
			for (int i = 0; i < n; i++)
				if (r->f[i].state == AT_BLOCK)
					r->f[i].state = READY;
			continue;
		}
		fail(r, "deadlock: threads wait at a __syncthreads others never reach, or at a warp operation "
		        "while other lanes of their warp wait at a barrier");
		return false;
	}
}

// ---- the operations a thread calls ----

void __syncthreads(void) {
	Runner *r = cur_runner;
	Fiber *f = &r->f[r->cur];
	f->state = AT_BLOCK;
	to_sched(r, f);
}

// warp_op posts v at the current warp operation and waits for the warp; it returns the lane's
// warp, lane index and the generation's parity.
static Warp *warp_op(uint64_t v, unsigned mask, int *lane, int *g) {
	Runner *r = cur_runner;
	int i = r->cur;
	Fiber *f = &r->f[i];
	Warp *w = &r->w[i >> 5];
	*lane = i & 31;
	*g = f->wgen & 1;
	w->buf[*g][*lane] = v;
	f->state = AT_WARP;
	to_sched(r, f);
	f->wgen++;
	unsigned live = w->live[*g];
	if ((live & mask) != live || (mask & ~live) != 0)
		fail(r, "warp operation's mask does not name exactly the warp's live lanes");
	return w;
}

void __syncwarp(unsigned mask) {
	int lane, g;
	warp_op(0, mask, &lane, &g);
}

template <typename T> static uint64_t bits(T v) {
	uint64_t u = 0;
	memcpy(&u, &v, sizeof v);
	return u;
}

template <typename T> static T unbits(uint64_t u) {
	T v;
	memcpy(&v, &u, sizeof v);
	return v;
}

template <typename T> static T shfl(unsigned mask, T v, int src_of_lane_kind, int arg, int width) {
	int lane, g;
	if (width != 32)
		fail(cur_runner, "shuffle width other than 32 is not emulated");
	Warp *w = warp_op(bits(v), mask, &lane, &g);
	int src = lane;
	switch (src_of_lane_kind) {
	case 0:
		src = arg & 31;
		break;
	case 1:
		src = (lane ^ arg) & 31;
		break;
	case 2:
		src = lane + arg < 32 ? lane + arg : lane;
		break;
	}
	if (!(w->live[g] >> src & 1))
		fail(cur_runner, "shuffle reads a lane that has exited");
	return unbits<T>(w->buf[g][src]);
}

float __shfl_sync(unsigned m, float v, int s, int wd) { return shfl(m, v, 0, s, wd); }
int __shfl_sync(unsigned m, int v, int s, int wd) { return shfl(m, v, 0, s, wd); }
unsigned __shfl_sync(unsigned m, unsigned v, int s, int wd) { return shfl(m, v, 0, s, wd); }
float __shfl_xor_sync(unsigned m, float v, int s, int wd) { return shfl(m, v, 1, s, wd); }
int __shfl_xor_sync(unsigned m, int v, int s, int wd) { return shfl(m, v, 1, s, wd); }
unsigned __shfl_xor_sync(unsigned m, unsigned v, int s, int wd) { return shfl(m, v, 1, s, wd); }
float __shfl_down_sync(unsigned m, float v, unsigned s, int wd) { return shfl(m, v, 2, (int)s, wd); }
int __shfl_down_sync(unsigned m, int v, unsigned s, int wd) { return shfl(m, v, 2, (int)s, wd); }
unsigned __shfl_down_sync(unsigned m, unsigned v, unsigned s, int wd) { return shfl(m, v, 2, (int)s, wd); }

unsigned __ballot_sync(unsigned mask, int pred) {
	int lane, g;
	Warp *w = warp_op(pred != 0, mask, &lane, &g);
	unsigned out = 0, live = w->live[g];
	for (int l = 0; l < 32; l++)
		if ((live >> l & 1) && w->buf[g][l])
			out |= 1u << l;
	return out & mask;
}

int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }

int __all_sync(unsigned mask, int pred) {
	int lane, g;
	Warp *w = warp_op(pred != 0, mask, &lane, &g);
	unsigned live = w->live[g];
	for (int l = 0; l < 32; l++)
		if ((live >> l & 1) && !w->buf[g][l])
			return 0;
	return 1;
}

// emu_mma_bf16: the lanes post their fragments of a (4 words) and b (2 words) with a tag no
// shuffle or vote posts (their values are at most 32 bits), so lanes meeting at the same
// generation but at different warp operations are reported. After the release each lane reads
// the elements it needs from the posting lanes. a(r, k) sits in lane (r % 8)·4 + (k % 8) / 2,
// word (r / 8) + 2·(k / 8), half k % 2; b(k, n) in lane n·4 + (k % 8) / 2, word k / 8, half
// k % 2 (the inverse of the PTX ISA's m16n8k16 layouts quoted at mma_bf16 in common.cuh). The
// products of two bf16 are exact in f32; they are summed in f32 in k order and c added last
// (the tensor core's summation order and internal precision are not specified, so a test of it
// allows f32 rounding).
static const uint64_t kMmaTag = 0x6d6d61ull << 40;

static inline float frag_bf16(const uint32_t *lane_frag, int word, int half) {
	return __uint_as_float((lane_frag[word] >> (16 * half)) << 16);
}

void emu_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	Runner *r = cur_runner;
	int i = r->cur;
	Fiber *f = &r->f[i];
	Warp *w = &r->w[i >> 5];
	uint32_t *mine = w->frag[f->wgen & 1][i & 31];
	for (int k = 0; k < 4; k++)
		mine[k] = a[k];
	mine[4] = b[0];
	mine[5] = b[1];
	int lane, g;
	warp_op(kMmaTag, 0xffffffffu, &lane, &g); // the whole warp, as mma.sync.aligned takes it
	if (w->live[g] != 0xffffffffu)
		return; // warp_op reported the exited lanes
	for (int l = 0; l < 32; l++)
		if (w->buf[g][l] != kMmaTag) {
			fail(r, "lanes of one warp at different warp operations (an mma and a shuffle or vote)");
			return;
		}
	uint32_t(*fr)[6] = w->frag[g];
	int gid = lane >> 2, tig = lane & 3;
	float out[4];
	for (int e = 0; e < 4; e++) {
		int row = gid + 8 * (e >> 1), col = 2 * tig + (e & 1);
		float s = 0;
		for (int k = 0; k < 16; k++) {
			float x = frag_bf16(fr[(row & 7) * 4 + ((k & 7) >> 1)], (row >> 3) + 2 * (k >> 3), k & 1);
			float y = frag_bf16(fr[col * 4 + ((k & 7) >> 1)] + 4, k >> 3, k & 1);
			s += x * y;
		}
		out[e] = s + c[e];
	}
	for (int e = 0; e < 4; e++)
		d[e] = out[e];
}

// ---- launches ----

extern "C" int emu_run(int k, uint64_t *slots, int nargs, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared, long first, long step, char *err, int errlen) {
	if (k < 0 || k >= (int)table().size()) {
		snprintf(err, errlen, "no kernel %d", k);
		return 1;
	}
	long threads = (long)bx * by * bz;
	if (threads < 1 || threads > kMaxThreads) {
		snprintf(err, errlen, "block of %ld threads (1 to %d)", threads, kMaxThreads);
		return 1;
	}
	Runner *r = get_runner();
	if (!r->ensure((int)threads)) {
		put_runner(r);
		snprintf(err, errlen, "cannot map fiber stacks");
		return 1;
	}
	void *argv[64];
	for (int i = 0; i < nargs && i < 64; i++)
		argv[i] = &slots[i];
	r->n = (int)threads;
	r->w.resize((threads + 31) / 32);
	r->fn = table()[k].fn;
	r->call = table()[k].call;
	r->args = argv;
	r->err.clear();
	if (r->dyn.size() < shared)
		r->dyn.resize(shared);
	cur_runner = r;
	emu_thread_idx = dim3{0, 0, 0};
	emu_block_dim = dim3{bx, by, bz};
	emu_grid_dim = dim3{gx, gy, gz};
	long nblocks = (long)gx * gy * gz;
	int rc = 0;
	for (long b = first; b < nblocks; b += step) {
		emu_block_idx = dim3{(unsigned)(b % gx), (unsigned)((b / gx) % gy), (unsigned)(b / ((long)gx * gy))};
		// Dynamic shared memory starts as NaN bytes each block, so a read before a write shows.
		if (shared)
			memset(r->dyn.data(), 0xff, shared);
		emu_dyn_shared = shared ? r->dyn.data() : nullptr;
		if (!run_block(r)) {
			snprintf(err, errlen, "kernel %s, block (%u,%u,%u): %s", table()[k].name, emu_block_idx.x,
			         emu_block_idx.y, emu_block_idx.z, r->err.c_str());
			rc = 1;
			break;
		}
	}
	cur_runner = nullptr;
	put_runner(r);
	return rc;
}

// ---- memory: device addresses are integers on the Go side ----

static const int kCanary = 64;

extern "C" uint64_t emu_alloc(uint64_t n) {
	void *p = nullptr;
	if (posix_memalign(&p, 256, n + kCanary) != 0)
		return 0;
	memset((char *)p + n, 0xA5, kCanary);
	return (uint64_t)(uintptr_t)p;
}

extern "C" void emu_free(uint64_t p) { free((void *)(uintptr_t)p); }

extern "C" int emu_canary_ok(uint64_t p, uint64_t n) {
	const unsigned char *c = (const unsigned char *)(uintptr_t)p + n;
	for (int i = 0; i < kCanary; i++)
		if (c[i] != 0xA5)
			return 0;
	return 1;
}

extern "C" void emu_copy_in(uint64_t dst, const void *src, uint64_t n) { memcpy((void *)(uintptr_t)dst, src, n); }
extern "C" void emu_copy_out(void *dst, uint64_t src, uint64_t n) { memcpy(dst, (const void *)(uintptr_t)src, n); }
extern "C" void emu_copy(uint64_t dst, uint64_t src, uint64_t n) {
	memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
}
extern "C" void emu_zero(uint64_t dst, uint64_t n) { memset((void *)(uintptr_t)dst, 0, n); }
