//go:build cgo

// The driver loader: dlopen of libcuda.so.1 and cuBLAS, and thin wrappers that make the
// device's context current first (a Go goroutine may move between OS threads between calls, and
// a CUDA context is current per thread).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "driver.h"

typedef void *cu_handle;

static cu_result (*p_cuInit)(unsigned);
static cu_result (*p_cuDriverGetVersion)(int *);
static cu_result (*p_cuDeviceGetCount)(int *);
static cu_result (*p_cuDeviceGet)(int *, int);
static cu_result (*p_cuDeviceGetName)(char *, int, int);
static cu_result (*p_cuDeviceGetAttribute)(int *, int, int);
static cu_result (*p_cuDeviceTotalMem)(size_t *, int);
static cu_result (*p_cuDevicePrimaryCtxRetain)(cu_handle *, int);
static cu_result (*p_cuDevicePrimaryCtxRelease)(int);
static cu_result (*p_cuCtxSetCurrent)(cu_handle);
static cu_result (*p_cuModuleLoadDataEx)(cu_handle *, const void *, unsigned, int *, void **);
static cu_result (*p_cuModuleGetFunction)(cu_handle *, cu_handle, const char *);
static cu_result (*p_cuModuleUnload)(cu_handle);
static cu_result (*p_cuMemAlloc)(cu_ptr *, size_t);
static cu_result (*p_cuMemFree)(cu_ptr);
static cu_result (*p_cuMemGetInfo)(size_t *, size_t *);
static cu_result (*p_cuMemcpyHtoDAsync)(cu_ptr, const void *, size_t, cu_handle);
static cu_result (*p_cuMemcpyDtoHAsync)(void *, cu_ptr, size_t, cu_handle);
static cu_result (*p_cuMemcpyDtoDAsync)(cu_ptr, cu_ptr, size_t, cu_handle);
static cu_result (*p_cuMemsetD8Async)(cu_ptr, unsigned char, size_t, cu_handle);
static cu_result (*p_cuStreamCreate)(cu_handle *, unsigned);
static cu_result (*p_cuStreamDestroy)(cu_handle);
static cu_result (*p_cuStreamSynchronize)(cu_handle);
static cu_result (*p_cuLaunchKernel)(cu_handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, cu_handle, void **, void **);
static cu_result (*p_cuFuncSetAttribute)(cu_handle, int, int);
static cu_result (*p_cuStreamBeginCapture)(cu_handle, int);
static cu_result (*p_cuStreamEndCapture)(cu_handle, cu_handle *);
static cu_result (*p_cuGraphInstantiateWithFlags)(cu_handle *, cu_handle, unsigned long long);
static cu_result (*p_cuGraphLaunch)(cu_handle, cu_handle);
static cu_result (*p_cuGraphExecDestroy)(cu_handle);
static cu_result (*p_cuGraphDestroy)(cu_handle);
static cu_result (*p_cuGetErrorName)(cu_result, const char **);
static cu_result (*p_cuGetErrorString)(cu_result, const char **);

// Values from the driver API's public enums.
enum {
	ATTR_SM_COUNT = 16,
	ATTR_CC_MAJOR = 75,
	ATTR_CC_MINOR = 76,
	FUNC_ATTR_MAX_DYNAMIC_SHARED = 8,
	JIT_ERROR_LOG_BUFFER = 5,
	JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
	STREAM_NON_BLOCKING = 1,
	CAPTURE_MODE_RELAXED = 2,
};

static void *lib;

#define SYM(var, name)                                                                      \
	do {                                                                                    \
		*(void **)(&var) = dlsym(lib, name);                                                \
		if (!var) {                                                                         \
			snprintf(err, errlen, "%s has no %s (the driver is too old)", where, name); \
			return 1;                                                                       \
		}                                                                                   \
	} while (0)

int cud_open(const char *path, char *err, int errlen) {
	const char *where = path ? path : "libcuda.so.1";
	if (lib)
		return 0;
	lib = dlopen(where, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	// cuDriverGetVersion first: the rest may be missing from a very old driver.
	SYM(p_cuDriverGetVersion, "cuDriverGetVersion");
	SYM(p_cuInit, "cuInit");
	SYM(p_cuGetErrorName, "cuGetErrorName");
	SYM(p_cuGetErrorString, "cuGetErrorString");
	SYM(p_cuDeviceGetCount, "cuDeviceGetCount");
	SYM(p_cuDeviceGet, "cuDeviceGet");
	SYM(p_cuDeviceGetName, "cuDeviceGetName");
	SYM(p_cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(p_cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(p_cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(p_cuModuleLoadDataEx, "cuModuleLoadDataEx");
	SYM(p_cuModuleGetFunction, "cuModuleGetFunction");
	SYM(p_cuModuleUnload, "cuModuleUnload");
	SYM(p_cuMemAlloc, "cuMemAlloc_v2");
	SYM(p_cuMemFree, "cuMemFree_v2");
	SYM(p_cuMemGetInfo, "cuMemGetInfo_v2");
	SYM(p_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(p_cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(p_cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(p_cuMemsetD8Async, "cuMemsetD8Async");
	SYM(p_cuStreamCreate, "cuStreamCreate");
	SYM(p_cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(p_cuStreamSynchronize, "cuStreamSynchronize");
	SYM(p_cuLaunchKernel, "cuLaunchKernel");
	SYM(p_cuFuncSetAttribute, "cuFuncSetAttribute");
	SYM(p_cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	SYM(p_cuStreamEndCapture, "cuStreamEndCapture");
	SYM(p_cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	SYM(p_cuGraphLaunch, "cuGraphLaunch");
	SYM(p_cuGraphExecDestroy, "cuGraphExecDestroy");
	SYM(p_cuGraphDestroy, "cuGraphDestroy");
	return 0;
}

cu_result cud_init(int *count, int *version, char *name, int namelen, int *major, int *minor, int *sms, size_t *mem) {
	cu_result r;
	*count = 0;
	if ((r = p_cuDriverGetVersion(version)) != 0)
		return r;
	if ((r = p_cuInit(0)) != 0)
		return r;
	if ((r = p_cuDeviceGetCount(count)) != 0 || *count == 0)
		return r;
	int dev;
	if ((r = p_cuDeviceGet(&dev, 0)) != 0)
		return r;
	if ((r = p_cuDeviceGetName(name, namelen, dev)) != 0)
		return r;
	if ((r = p_cuDeviceGetAttribute(major, ATTR_CC_MAJOR, dev)) != 0)
		return r;
	if ((r = p_cuDeviceGetAttribute(minor, ATTR_CC_MINOR, dev)) != 0)
		return r;
	if ((r = p_cuDeviceGetAttribute(sms, ATTR_SM_COUNT, dev)) != 0)
		return r;
	return p_cuDeviceTotalMem(mem, dev);
}

void cud_error_text(cu_result r, char *buf, int len) {
	const char *n = 0, *s = 0;
	if (p_cuGetErrorName)
		p_cuGetErrorName(r, &n);
	if (p_cuGetErrorString)
		p_cuGetErrorString(r, &s);
	snprintf(buf, len, "%s (%d): %s", n ? n : "CUDA error", r, s ? s : "unknown");
}

cu_result cud_ctx(void **ctx, void **stream) {
	cu_result r;
	int dev;
	if ((r = p_cuDeviceGet(&dev, 0)) != 0)
		return r;
	if ((r = p_cuDevicePrimaryCtxRetain(ctx, dev)) != 0)
		return r;
	if ((r = p_cuCtxSetCurrent(*ctx)) != 0)
		return r;
	return p_cuStreamCreate(stream, STREAM_NON_BLOCKING);
}

#define CUR(ctx)                                         \
	do {                                                 \
		cu_result r_ = p_cuCtxSetCurrent((cu_handle)ctx); \
		if (r_ != 0)                                     \
			return r_;                                   \
	} while (0)

cu_result cud_close(void *ctx, void *stream, void *mod) {
	CUR(ctx);
	// The primary context may outlive this device (cuBLAS's runtime keeps a reference to it):
	// release what this device made in it.
	if (stream)
		p_cuStreamSynchronize(stream);
	if (mod)
		p_cuModuleUnload(mod);
	if (stream)
		p_cuStreamDestroy(stream);
	int dev;
	cu_result r = p_cuDeviceGet(&dev, 0);
	if (r != 0)
		return r;
	return p_cuDevicePrimaryCtxRelease(dev);
}

cu_result cud_module(void *ctx, const char *ptx, void **mod, char *log, int loglen) {
	CUR(ctx);
	int opts[2] = {JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(size_t)loglen};
	log[0] = 0;
	return p_cuModuleLoadDataEx(mod, ptx, 2, opts, vals);
}

cu_result cud_func(void *ctx, void *mod, const char *name, void **fn) {
	CUR(ctx);
	return p_cuModuleGetFunction(fn, mod, name);
}

cu_result cud_alloc(void *ctx, cu_ptr *p, size_t n) {
	CUR(ctx);
	return p_cuMemAlloc(p, n);
}

cu_result cud_free(void *ctx, cu_ptr p) {
	CUR(ctx);
	return p_cuMemFree(p);
}

cu_result cud_mem_info(void *ctx, size_t *free_bytes, size_t *total) {
	CUR(ctx);
	return p_cuMemGetInfo(free_bytes, total);
}

cu_result cud_htod(void *ctx, void *stream, cu_ptr dst, const void *src, size_t n) {
	CUR(ctx);
	cu_result r = p_cuMemcpyHtoDAsync(dst, src, n, stream);
	if (r != 0)
		return r;
	// The source is Go memory the caller may reuse at once: wait for the copy.
	return p_cuStreamSynchronize(stream);
}

cu_result cud_dtoh(void *ctx, void *stream, void *dst, cu_ptr src, size_t n) {
	CUR(ctx);
	cu_result r = p_cuMemcpyDtoHAsync(dst, src, n, stream);
	if (r != 0)
		return r;
	return p_cuStreamSynchronize(stream);
}

cu_result cud_dtod(void *ctx, void *stream, cu_ptr dst, cu_ptr src, size_t n) {
	CUR(ctx);
	return p_cuMemcpyDtoDAsync(dst, src, n, stream);
}

cu_result cud_zero(void *ctx, void *stream, cu_ptr dst, size_t n) {
	CUR(ctx);
	return p_cuMemsetD8Async(dst, 0, n, stream);
}

cu_result cud_sync(void *ctx, void *stream) {
	CUR(ctx);
	return p_cuStreamSynchronize(stream);
}

cu_result cud_launch(void *ctx, void *stream, void *fn, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned shared, uint64_t *slots, int nargs) {
	CUR(ctx);
	void *params[32];
	if (nargs > 32)
		return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++)
		params[i] = &slots[i];
	return p_cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0);
}

cu_result cud_set_shared(void *ctx, void *fn, int bytes) {
	CUR(ctx);
	return p_cuFuncSetAttribute(fn, FUNC_ATTR_MAX_DYNAMIC_SHARED, bytes);
}

cu_result cud_begin_capture(void *ctx, void *stream) {
	CUR(ctx);
	return p_cuStreamBeginCapture(stream, CAPTURE_MODE_RELAXED);
}

cu_result cud_end_capture(void *ctx, void *stream, void **exec) {
	CUR(ctx);
	cu_handle g = 0;
	cu_result r = p_cuStreamEndCapture(stream, &g);
	if (r != 0)
		return r;
	r = p_cuGraphInstantiateWithFlags(exec, g, 0);
	p_cuGraphDestroy(g);
	return r;
}

cu_result cud_graph_launch(void *ctx, void *stream, void *exec) {
	CUR(ctx);
	return p_cuGraphLaunch(exec, stream);
}

cu_result cud_graph_destroy(void *ctx, void *exec) {
	CUR(ctx);
	return p_cuGraphExecDestroy(exec);
}

// cuBLAS.
static int (*p_cublasCreate)(cu_handle *);
static int (*p_cublasDestroy)(cu_handle);
static int (*p_cublasSetStream)(cu_handle, cu_handle);
static int (*p_cublasSetWorkspace)(cu_handle, void *, size_t);
static int (*p_cublasGemmEx)(cu_handle, int, int, int, int, int, const void *, const void *, int, int,
                             const void *, int, int, const void *, void *, int, int, int, int);

enum {
	CUBLAS_OP_N = 0,
	CUBLAS_OP_T = 1,
	CUDA_R_32F = 0,
	CUDA_R_16BF = 14,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_GEMM_DEFAULT = -1,
};

// cublas_try opens one cuBLAS library and creates a handle on stream with the workspace; 0 on
// success, else 1 with the library closed and a message in err.
static int cublas_try(void *ctx, void *stream, const char *name, cu_ptr workspace, size_t wsbytes, void **handle, char *err, int errlen) {
	void *bl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!bl) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	*(void **)(&p_cublasCreate) = dlsym(bl, "cublasCreate_v2");
	*(void **)(&p_cublasDestroy) = dlsym(bl, "cublasDestroy_v2");
	*(void **)(&p_cublasSetStream) = dlsym(bl, "cublasSetStream_v2");
	*(void **)(&p_cublasSetWorkspace) = dlsym(bl, "cublasSetWorkspace_v2");
	*(void **)(&p_cublasGemmEx) = dlsym(bl, "cublasGemmEx");
	if (!p_cublasCreate || !p_cublasDestroy || !p_cublasSetStream || !p_cublasSetWorkspace || !p_cublasGemmEx) {
		snprintf(err, errlen, "%s lacks cublasCreate_v2, cublasSetStream_v2, cublasSetWorkspace_v2 or cublasGemmEx", name);
		dlclose(bl);
		return 1;
	}
	if (p_cuCtxSetCurrent(ctx) != 0) {
		snprintf(err, errlen, "cuCtxSetCurrent failed");
		dlclose(bl);
		return 1;
	}
	int s;
	if ((s = p_cublasCreate(handle)) != 0) {
		// A library newer than the driver (libcublas.so.13 on a CUDA 12 driver) fails here.
		snprintf(err, errlen, "%s: cublasCreate_v2: status %d", name, s);
		dlclose(bl);
		return 1;
	}
	// The stream first: cublasSetStream resets the workspace to the library's own.
	if ((s = p_cublasSetStream(*handle, stream)) != 0 || (s = p_cublasSetWorkspace(*handle, (void *)workspace, wsbytes)) != 0) {
		snprintf(err, errlen, "%s: cublasSetStream/SetWorkspace: status %d", name, s);
		p_cublasDestroy(*handle);
		dlclose(bl);
		return 1;
	}
	return 0;
}

int cublas_open(void *ctx, void *stream, const char *path, int driver_major, cu_ptr workspace, size_t wsbytes, void **handle, char *which, int whichlen, char *err, int errlen) {
	if (path && path[0]) {
		snprintf(which, whichlen, "%s", path);
		return cublas_try(ctx, stream, path, workspace, wsbytes, handle, err, errlen);
	}
	// The newest the driver supports first (a CUDA 13 system has only libcublas.so.13; older
	// libraries run on newer drivers).
	static const struct {
		const char *name;
		int major;
	} libs[] = {{"libcublas.so.13", 13}, {"libcublas.so.12", 12}, {"libcublas.so.11", 11}};
	char e[256] = "";
	int n = 0;
	err[0] = 0;
	for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
		if (libs[i].major > driver_major)
			continue;
		if (cublas_try(ctx, stream, libs[i].name, workspace, wsbytes, handle, e, sizeof e) == 0) {
			snprintf(which, whichlen, "%s", libs[i].name);
			return 0;
		}
		n += snprintf(err + n, n < errlen ? errlen - n : 0, "%s%s", n ? "; " : "", e);
		if (n >= errlen)
			n = errlen - 1;
	}
	if (!err[0])
		snprintf(err, errlen, "no cuBLAS library for driver CUDA %d", driver_major);
	return 1;
}

int cublas_gemm_bf16(void *ctx, void *handle, int N, int T, int K, cu_ptr w, cu_ptr x, cu_ptr out, int ldo, float beta) {
	if (p_cuCtxSetCurrent(ctx) != 0)
		return -1;
	// Column-major view: C (N×T, ldc = ldo) = Wᵀᵀ·X: A is row-major W (K×N column-major,
	// transposed), B is row-major X (K×T column-major).
	float alpha = 1;
	return p_cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, (const void *)w, CUDA_R_16BF, K,
	                      (const void *)x, CUDA_R_16BF, K, &beta, (void *)out, CUDA_R_32F, ldo,
	                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

void cublas_close(void *ctx, void *handle) {
	if (handle && p_cuCtxSetCurrent(ctx) == 0)
		p_cublasDestroy(handle);
}
