//go:build !purego

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// threadCPU is the calling thread's CPU time (user and system).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKernelRate runs the matrix-matrix micro-kernels on operands that stay in L1 and
// reports multiply-adds per second of the thread's CPU time (not wall time), so a figure means
// the same on a machine shared with other work: the kernels' own speed, against which the
// blocking around them (packing, cache traffic, threads) can be judged.
func BenchmarkKernelRate(b *testing.B) {
	p := new(gemmPack)
	rate := func(name string, macs int, f func()) {
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread() // RUSAGE_THREAD: this goroutine's thread only
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			for b.Loop() {
				f()
			}
			if cpu := threadCPU() - t0; cpu > 0 { // zero below the clock's tick (a short -benchtime)
				b.ReportMetric(float64(b.N)*float64(macs)/cpu.Seconds()/1e9, "GMAC/s-cpu")
			}
		})
	}
	const c = 896
	wf := fastMatrix(F32, 4, c, 1)
	xf := fastMatrix(F32, 6, c, 2).F32
	df := make([]float32, 6*4)
	if hasAVX512 {
		rate("f32/gemm4x6F32", 4*6*c, func() { gemm4x6F32(&wf.F32[0], c, &xf[0], c, c, &df[0], 4, 0) })
	}
	if hasAVX2 {
		const k = gemmKC2
		panel := make([]float32, 16*k)
		d := make([]float32, 6*16)
		rate("f32/avx2Gemm16", 16*6*k, func() { avx2Gemm16(6, &panel[0], &xf[0], c, k, &d[0], 16, 0) })
		w := fastMatrix(Q8, 8, c, 1)
		x := fastMatrix(F32, avx2Q8M, c, 2).F32
		xq, xs := make([]int8, avx2Q8M*c), make([]float32, avx2Q8M*c/4)
		for i := range avx2Q8M {
			avx2QuantX8(&xq[i*c], &xs[i*c/4], &x[i*c], c/Q8Block)
		}
		var idx, sidx [8]int32
		for j := range 8 {
			idx[j], sidx[j] = int32(j*c/4), int32(j*c/Q8Block)
		}
		wp, sp := make([]byte, 16*c), make([]float32, 8*c/Q8Block)
		avx2Pack8(&wp[0], 64, (*byte)(unsafe.Pointer(&w.Q8[0])), &idx, c/4, 1)
		avx2Pack8((*byte)(unsafe.Pointer(&sp[0])), 32, (*byte)(unsafe.Pointer(&w.Scales[0])), &sidx, c/Q8Block, 0)
		rate("q8/avx2GemmQ8", 8*avx2Q8M*c, func() { avx2GemmQ8(&wp[0], &sp[0], &xq[0], c, &xs[0], c/4, c/Q8Block, avx2Q8M, &d[0], 8) })
	}
	if hasVNNI {
		w := fastMatrix(Q8, 32, c, 1)
		in := prepareGemm(w, fastMatrix(F32, 6, c, 2).F32, 6)
		for pn := range 2 {
			packRows(unsafe.Pointer(&p.w[64*pn]), 128, unsafe.Pointer(&w.Q8[0]), c, 16*pn, 31, 32, 0, c, 0x80808080)
		}
		d := make([]float32, 6*32)
		rate("q8/gemmQ8VNNI", 32*6*c, func() {
			gemmQ8VNNI(&p.w[0], &p.s[0], &in.xq[0], c, &in.xs[0], c/4, &in.corr[0], c/Q8Block, c/Q8Block, 6, &d[0], 32, 0xffff, 0xffff, 0)
		})
	}
	if hasBF16 {
		const k = bfKC
		w := fastMatrix(BF16, 64, k, 1)
		in := prepareGemm(w, fastMatrix(F32, 6, k, 2).F32, 6)
		for pn := range 4 {
			packRows(unsafe.Pointer(&p.w[64*pn]), 256, unsafe.Pointer(&w.U16[0]), 2*k, 16*pn, 63, 64, 0, 2*k, 0)
		}
		wp := (*uint16)(unsafe.Pointer(&p.w[0]))
		d := make([]float32, 6*64)
		rate("bf16/gemmBF16", 64*6*k, func() { gemmBF16(wp, &in.xb[0], k, k/2, 6, &d[0], 64, ^uint64(0), 0) })
	}
	// Decode attention of the 0.5B shape (7 query heads per kv head, head dim 64, blocks of 256)
	// on one thread: one kv head over 256 keys (its keys and values, 128 KiB, stay in L2) and over
	// 2,048 (1 MiB, about L2's size); 2·7·64 multiply-adds per key.
	defer withThreads(Threads())() // restored even when a check below fails the benchmark
	for _, n := range []int{256, 2048} {
		old := Threads()
		SetThreads(1)
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		k, v := randVec(rng, n*64), randVec(rng, n*64)
		h := AttendHead{
			Out: make([]float32, 7*64), Q: randVec(rng, 7*64),
			K: toKeyTiles(k, n, 64, 256), V: toPaged(v, n, 64, 256, true),
		}
		// The products' operands: the keys by rows (n×64) and the values by columns (64×n,
		// blocks of 256 positions), as MatMulPaged multiplies them.
		vT := make([]float32, 64*n)
		for j := range n {
			for c := range 64 {
				vT[c*n+j] = v[j*64+c]
			}
		}
		kRows, vCols := toPaged(k, n, 64, 256, true), toPaged(vT, 64, n, 256, false)
		// The same attention as two matrix-vector products through the blocks with a softmax
		// between (what qwen2's decode ran before Attend), for comparison; checked once against
		// Attend, so that the two rates time the same result.
		sc, mvOut := make([]float32, 7*n), make([]float32, 7*64)
		mv := func() {
			MatMulPaged(sc, kRows, h.Q, 7)
			for r := range 7 {
				Softmax(sc[r*n : (r+1)*n])
			}
			MatMulPaged(mvOut, vCols, sc, 7)
		}
		Attend([]AttendHead{h}, 7)
		mv()
		for i, want := range h.Out {
			if d := math.Abs(float64(mvOut[i] - want)); d > 1e-4*(1+math.Abs(float64(want))) {
				b.Fatalf("attend over %d keys: output %d: the products give %g, Attend %g", n, i, mvOut[i], want)
			}
		}
		rate(fmt.Sprintf("attend/decode-%d", n), 2*7*64*n, func() { Attend([]AttendHead{h}, 7) })
		rate(fmt.Sprintf("attend/paged-mv-%d", n), 2*7*64*n, mv)
		SetThreads(old)
	}
}
