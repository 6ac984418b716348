package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// TestBenchCommand runs `student bench` through the built binary on the tiny checkpoint: the
// JSON object and the table, each weight type, a batched test, and bad input.
func TestBenchCommand(t *testing.T) {
	model := shared.Path(t, "models/tiny-qwen2-f32")
	bin := testbin.Build(t, ".")
	small := []string{"--model", model, "--prompt", "40", "--gen", "6", "--repeat", "2", "--threads", "2"}

	for _, dt := range []string{"f32", "bf16", "q8"} {
		t.Run("json/"+dt, func(t *testing.T) {
			args := append([]string{"bench", "--json", "--dtype", dt, "--batch", "3"}, small...)
			stdout, stderr := runOK(t, bin, args...)
			var r struct {
				DType       string  `json:"dtype"`
				Kernels     string  `json:"kernels"`
				Threads     int     `json:"threads"`
				Prefill     float64 `json:"prefill_tok_s"`
				Decode      float64 `json:"decode_tok_s"`
				DecodeGBs   float64 `json:"decode_gb_s"`
				BatchDecode float64 `json:"batch_decode_tok_s"`
				RSS         float64 `json:"peak_rss_mib"`
				Load        float64 `json:"load_s"`
				PerToken    int64   `json:"decode_bytes_per_token"`
				Weights     int64   `json:"decode_weights_per_token"`
				Plan        struct {
					Q8Panels bool `json:"q8_panels"`
				} `json:"plan"`
				Samples struct {
					Samples []float64 `json:"samples"`
				} `json:"decode"`
			}
			decodeJSON(t, stdout, &r)
			if strings.Count(strings.TrimSpace(stdout), "\n") != 0 {
				t.Errorf("stdout has more than one line:\n%s", stdout)
			}
			if r.DType != dt || r.Threads != 2 || r.Kernels == "" {
				t.Errorf("dtype %q threads %d kernels %q", r.DType, r.Threads, r.Kernels)
			}
			if !(r.Prefill > 0 && r.Decode > 0 && r.BatchDecode > 0 && r.DecodeGBs > 0 && r.RSS > 10 && r.Load > 0) {
				t.Errorf("figures missing: %+v", r)
			}
			if len(r.Samples.Samples) != 2 {
				t.Errorf("%d decode samples, want --repeat 2", len(r.Samples.Samples))
			}
			// tiny: hidden 64, intermediate 128, 2 layers, 4 heads of 16, 2 KV heads, vocab 151936, tied.
			elems := int64(2*(64*64+2*64*32+64*64+3*64*128) + 151936*64)
			q8 := elems + elems/8 // f32 scales in rows; halves where the decode plan holds q8 in panels
			if r.Plan.Q8Panels {
				q8 = elems + elems/16
			}
			want := map[string]int64{"f32": 4 * elems, "bf16": 2 * elems, "q8": q8}[dt]
			if r.PerToken != want || r.Weights != elems {
				t.Errorf("decode bytes per token %d, weights %d; want %d, %d", r.PerToken, r.Weights, want, elems)
			}
			if !strings.Contains(stderr, "decode 6 x3 run 2") {
				t.Errorf("no progress lines on stderr: %q", stderr)
			}
		})
	}

	t.Run("table", func(t *testing.T) {
		stdout, stderr := runOK(t, bin, append([]string{"bench", "--quiet"}, small...)...)
		for _, want := range []string{"prefill 40", "decode 6", "peak RSS", "GB/s", "median of 2 runs"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
		if stderr != "" {
			t.Errorf("--quiet wrote to stderr: %q", stderr)
		}
	})

	t.Run("roofline", func(t *testing.T) {
		args := append([]string{"bench", "--roofline", "--prompt", "0"}, small[2:]...)
		args = append(args, "--model", model)
		stdout, stderr := runOK(t, bin, args...)
		for _, want := range []string{"cpu      ", "decode plan ", "roofline decode ", "GB/s measured read bandwidth ("} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, stdout)
			}
		}
		for _, want := range []string{"cpu: ", "read bandwidth: "} {
			if !strings.Contains(stderr, want) {
				t.Errorf("no %q on stderr: %q", want, stderr)
			}
		}
		stdout, stderr = runOK(t, bin, append(args, "--json")...)
		var r struct {
			ReadGBs     float64   `json:"read_gb_s"`
			Roofline    float64   `json:"roofline_pct"`
			ReadSamples []float64 `json:"read_samples_gb_s"`
			RoofSamples []float64 `json:"roofline_samples_pct"`
			BufferMiB   float64   `json:"read_buffer_mib"`
			CPU         struct {
				Vendor string `json:"vendor"`
				Uarch  string `json:"uarch"`
			} `json:"cpu"`
			Plan struct {
				Name string `json:"name"`
			} `json:"plan"`
		}
		decodeJSON(t, stdout, &r)
		if !(r.ReadGBs > 0 && r.Roofline > 0) || r.CPU.Vendor == "" || r.CPU.Uarch == "" || r.Plan.Name == "" {
			t.Errorf("result %+v", r)
		}
		// --repeat 2: a read pass before the first timed run and one after each.
		if len(r.ReadSamples) != 3 || len(r.RoofSamples) != 2 || r.BufferMiB < 256 {
			t.Errorf("read passes %v, roofline samples %v, buffer %v MiB", r.ReadSamples, r.RoofSamples, r.BufferMiB)
		}
		for _, v := range r.ReadSamples {
			if !(v > 0) {
				t.Errorf("read pass %v GB/s", v)
			}
		}
	})

	t.Run("read passes", func(t *testing.T) {
		stdout, _ := runOK(t, bin, "bench", "--read-passes", "2", "--threads", "2", "--json")
		var r struct {
			ReadGBs   float64   `json:"read_gb_s"`
			Samples   []float64 `json:"read_samples_gb_s"`
			Threads   int       `json:"threads"`
			BufferMiB float64   `json:"read_buffer_mib"`
			CPU       struct {
				Vendor string `json:"vendor"`
			} `json:"cpu"`
		}
		decodeJSON(t, stdout, &r)
		if len(r.Samples) != 2 || r.ReadGBs != max(r.Samples[0], r.Samples[1]) || !(r.ReadGBs > 0) || r.Threads != 2 || r.BufferMiB < 256 || r.CPU.Vendor == "" {
			t.Errorf("result %+v", r)
		}
		stdout, _ = runOK(t, bin, "bench", "--read-passes", "1")
		if !strings.Contains(stdout, "read     ") || !strings.Contains(stdout, "GB/s on ") {
			t.Errorf("text %q", stdout)
		}
	})

	t.Run("paired", func(t *testing.T) {
		args := []string{"bench", "--json", "--model", model, "--depth", "100", "--paired", "--prompt", "0", "--gen", "5", "--repeat", "2", "--threads", "2"}
		stdout, stderr := runOK(t, bin, args...)
		var r struct {
			Depth        int       `json:"depth"`
			Paired       bool      `json:"paired"`
			Decode       float64   `json:"decode_tok_s"`
			DecodeD0     float64   `json:"decode_d0_tok_s"`
			Ratio        float64   `json:"depth_ratio"`
			RatioSamples []float64 `json:"depth_ratio_samples"`
			D0           struct {
				Samples []float64 `json:"samples"`
			} `json:"decode_d0"`
		}
		decodeJSON(t, stdout, &r)
		if r.Depth != 100 || !r.Paired || !(r.Decode > 0 && r.DecodeD0 > 0 && r.Ratio > 0) || len(r.RatioSamples) != 10 || len(r.D0.Samples) != 2 {
			t.Errorf("result %+v", r)
		}
		for _, want := range []string{"decode 5 @ 0 (paired) run 2", "decode 5 @ 100 run 2"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("no %q on stderr: %q", want, stderr)
			}
		}
		code, stdout, stderr := testbin.Run(t, exec.Command(bin, append([]string{"bench", "--quiet"}, args[2:]...)...))
		if code != 0 || !strings.Contains(stdout, "decode 5 @ 0 (paired)") || !strings.Contains(stdout, "depth    100/0 ratio ") {
			t.Errorf("table: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("depth", func(t *testing.T) {
		args := []string{"bench", "--json", "--model", model, "--depth", "100", "--batch", "3", "--prompt", "20", "--gen", "5", "--repeat", "1", "--threads", "2"}
		stdout, stderr := runOK(t, bin, args...)
		var r struct {
			Depth       int     `json:"depth"`
			Backend     string  `json:"backend"`
			Prefill     float64 `json:"prefill_tok_s"`
			Decode      float64 `json:"decode_tok_s"`
			BatchDecode float64 `json:"batch_decode_tok_s"`
		}
		decodeJSON(t, stdout, &r)
		if r.Depth != 100 || r.Backend != "cpu" || !(r.Prefill > 0 && r.Decode > 0 && r.BatchDecode > 0) {
			t.Errorf("result %+v", r)
		}
		for _, want := range []string{"prefill 20 @ 100 run 1", "decode 5 @ 100 run 1", "decode 5 x3 @ 100 run 1"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("no %q on stderr: %q", want, stderr)
			}
		}
		// The same with each KV cache, named in the JSON and the table; without --kv, q8 weights
		// keep a bf16 cache and the checkpoint's f32 ones an f32 cache (qwen2.DefaultKVBF16).
		for _, c := range []struct {
			flags []string
			kv    string
		}{
			{[]string{"--kv", "f32"}, "f32"}, {[]string{"--kv", "bf16"}, "bf16"},
			{[]string{"--dtype", "q8"}, "bf16"}, {[]string{"--dtype", "q8", "--kv", "f32"}, "f32"},
		} {
			code, stdout, stderr := testbin.Run(t, exec.Command(bin, append(slices.Clone(args), c.flags...)...))
			var k struct {
				KV     string  `json:"kv_cache"`
				Decode float64 `json:"decode_tok_s"`
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &k) != nil || k.KV != c.kv || !(k.Decode > 0) {
				t.Errorf("%v: exit %d, %+v (want kv_cache %s), stderr %q", c.flags, code, k, c.kv, stderr)
			}
		}
		code, stdout, stderr := testbin.Run(t, exec.Command(bin, "bench", "--quiet", "--model", model, "--depth", "40", "--prompt", "0", "--gen", "3", "--repeat", "1", "--kv", "bf16"))
		if code != 0 || !strings.Contains(stdout, "kv cache bf16") {
			t.Errorf("--kv bf16 table: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		cases := []struct {
			args []string
			code int
			msg  string
		}{
			{[]string{}, 2, "--model DIR is required"},
			{[]string{"--model", model, "--dtype", "int4"}, 2, `weight type "int4"`},
			{[]string{"--model", model, "--prompt", "-1"}, 2, "must be >= 0"},
			{[]string{"--model", model, "--prompt", "0", "--gen", "0"}, 2, "nothing to measure"},
			{[]string{"--model", model, "--repeat", "0"}, 2, "repeat 0"},
			{[]string{"--model", model, "--batch", "4", "--gen", "0"}, 2, "needs gen > 0"},
			{[]string{"--model", model, "--threads", "-3"}, 2, "threads -3"},
			{[]string{"--model", model, "extra"}, 2, `unexpected argument "extra"`},
			{[]string{"--model", model, "--prompt", "x"}, 2, "invalid value"},
			{[]string{"--model", filepath.Join(t.TempDir(), "none")}, 1, "config.json"},
			{[]string{"--model", model, "--prompt", "40000"}, 1, "exceed the model's context length of 32768"},
			{[]string{"--model", model, "--depth", "-1"}, 2, "depth -1 must be >= 0"},
			{[]string{"--model", model, "--depth", "32700", "--gen", "100", "--prompt", "0"}, 1, "32800 tokens exceed the model's context length"},
			{[]string{"--model", model, "--backend", "tpu"}, 2, `backend "tpu"`},
			{[]string{"--model", model, "--backend", "cuda", "--dtype", "q8"}, 2, "holds the weights in bf16"},
			{[]string{"--model", model, "--roofline", "--gen", "0"}, 2, "roofline needs the decode test"},
			{[]string{"--model", model, "--roofline", "--backend", "cuda"}, 2, "backend cuda has none"},
			{[]string{"--model", model, "--paired"}, 2, "paired test needs a depth > 8"},
			{[]string{"--model", model, "--paired", "--depth", "8"}, 2, "paired test needs a depth > 8"},
			{[]string{"--model", model, "--paired", "--depth", "10", "--gen", "0"}, 2, "paired test needs the decode test"},
			{[]string{"--model", model, "--kv", "f16"}, 2, `--kv "f16": want f32 or bf16`},
			{[]string{"--model", model, "--kv", "f32", "--backend", "cuda"}, 2, "keeps its KV cache in bf16; KV cache type f32 is for the cpu backend"},
			{[]string{"--read-passes", "1", "--model", model, "--gen", "4"}, 2, "--gen, --model: not with --read-passes"},
			{[]string{"--read-passes", "-1"}, 2, "--read-passes -1, --threads 0: want at least one pass"},
			{[]string{"--read-passes", "0", "--model", model}, 2, "--model: not with --read-passes"},
			{[]string{"--read-passes", "0"}, 2, "--read-passes 0, --threads 0: want at least one pass"},
		}
		for _, c := range cases {
			code, stdout, stderr := testbin.Run(t, exec.Command(bin, append([]string{"bench"}, c.args...)...))
			if code != c.code || !strings.Contains(stderr, c.msg) {
				t.Errorf("bench %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.msg)
			}
			if stdout != "" {
				t.Errorf("bench %v: stdout %q, want nothing", c.args, stdout)
			}
		}
	})
}

// runOK runs the built binary with args and fails the test unless it exits 0; it returns what it
// wrote to stdout and stderr.
func runOK(t *testing.T, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := testbin.Run(t, exec.Command(bin, args...))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return stdout, stderr
}

// decodeJSON unmarshals stdout, which must be one JSON object, into v.
func decodeJSON(t *testing.T, stdout string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
}
