//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDriver is a libcuda stand-in: every entry point the loader resolves, with cuInit and
// cuDriverGetVersion answering as the build defines ask.
const fakeDriver = `
#include <stddef.h>
#define API(name) int name
API(cuDriverGetVersion)(int *v) { *v = VERSION; return 0; }
API(cuInit)(unsigned f) { return INIT; }
API(cuGetErrorName)(int r, const char **s) { *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN"; return 0; }
API(cuGetErrorString)(int r, const char **s) { *s = r == 100 ? "no CUDA-capable device is detected" : "unknown error"; return 0; }
API(cuDeviceGetCount)(int *n) { *n = 0; return 0; }
#define STUB(name) API(name)() { return 999; }
STUB(cuDeviceGet) STUB(cuDeviceGetName) STUB(cuDeviceGetAttribute) STUB(cuDeviceTotalMem_v2)
STUB(cuDevicePrimaryCtxRetain) STUB(cuDevicePrimaryCtxRelease_v2) STUB(cuCtxSetCurrent)
STUB(cuModuleLoadDataEx) STUB(cuModuleGetFunction) STUB(cuModuleUnload) STUB(cuMemAlloc_v2) STUB(cuMemFree_v2)
STUB(cuMemGetInfo_v2) STUB(cuMemcpyHtoDAsync_v2) STUB(cuMemcpyDtoHAsync_v2) STUB(cuMemcpyDtoDAsync_v2) STUB(cuMemsetD8Async)
STUB(cuStreamCreate) STUB(cuStreamDestroy_v2) STUB(cuStreamSynchronize) STUB(cuLaunchKernel)
STUB(cuFuncSetAttribute) STUB(cuStreamBeginCapture_v2) STUB(cuStreamEndCapture)
STUB(cuGraphLaunch) STUB(cuGraphExecDestroy) STUB(cuGraphDestroy)
#ifndef NO_GRAPH_INSTANTIATE
STUB(cuGraphInstantiateWithFlags)
#endif
`

const envRefusalHelper = "CHAINEDSQL_CUDA_REFUSAL_HELPER"

// TestMain lets TestRefusal run Open in a fresh process per fake driver (the loader keeps the
// library it opened for the life of the process).
func TestMain(m *testing.M) {
	if os.Getenv(envRefusalHelper) == "1" {
		_, err := Open(BackendCUDA)
		fmt.Printf("unavailable=%v\n%v\n", errors.Is(err, ErrUnavailable), err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRefusal: without a usable driver, opening the CUDA backend fails with one line that says
// why: no driver library, a driver too old (by version, or missing an entry point), no device.
func TestRefusal(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the fake drivers")
	}
	dir := t.TempDir()
	build := func(name string, defs ...string) string {
		src := filepath.Join(dir, name+".c")
		if err := os.WriteFile(src, []byte(fakeDriver), 0o644); err != nil {
			t.Fatal(err)
		}
		lib := filepath.Join(dir, name+".so")
		args := append([]string{"-shared", "-fPIC", "-o", lib, src}, defs...)
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		return lib
	}
	cases := []struct {
		name, lib, want string
	}{
		{"no driver", filepath.Join(dir, "absent", "libcuda.so.1"), "no NVIDIA driver: cannot load"},
		{"old version", build("old", "-DVERSION=11020", "-DINIT=0"), "NVIDIA driver too old: it supports CUDA 11.2, the kernels need 11.8 or later"},
		{"old entry points", build("noentry", "-DVERSION=12020", "-DINIT=0", "-DNO_GRAPH_INSTANTIATE"), "NVIDIA driver too old:"},
		{"no device", build("nodev", "-DVERSION=12020", "-DINIT=100"), "no CUDA device: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{"no device counted", build("zero", "-DVERSION=12020", "-DINIT=0"), "no CUDA device"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envRefusalHelper+"=1", EnvDriver+"="+c.lib)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 || lines[0] != "unavailable=true" || !strings.Contains(lines[1], c.want) {
				t.Fatalf("got %q, want one unavailable error containing %q", out, c.want)
			}
			t.Log(lines[1])
		})
	}
}

// TestRefusalHere opens the machine's own driver: where there is no GPU the error must be
// the one-line ErrUnavailable kind.
func TestRefusalHere(t *testing.T) {
	d, err := Open(BackendCUDA)
	if err == nil {
		t.Logf("device: %s", d.Name())
		d.Close()
		return
	}
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%q: want one line wrapping ErrUnavailable", err)
	}
	t.Log(err)
}
