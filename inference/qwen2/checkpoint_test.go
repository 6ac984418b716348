package qwen2

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/chainedsql/chainedsql/inference/cpu"
	"github.com/chainedsql/chainedsql/inference/safetensors"
)

// spec is the shape of a random test checkpoint.
type spec struct {
	hidden, inter, layers, heads, kv, vocab, maxPos int
	theta                                           float64
	tied                                            bool
	dtype                                           safetensors.DType // F32, BF16 or F16
	shards                                          int               // > 1: sharded with an index
	seed                                            uint64
	override                                        map[string]safetensors.DType // tensor name → dtype written (tests of bad files)
}

// smallSpec is a checkpoint small enough for unit tests yet with grouped heads, several layers
// and columns that are multiples of 32 (for q8).
func smallSpec(dtype safetensors.DType) spec {
	return spec{hidden: 64, inter: 96, layers: 3, heads: 4, kv: 2, vocab: 300, maxPos: 256, theta: 10000, tied: false, dtype: dtype, seed: 7}
}

// spec05B is the Qwen2.5-0.5B shape.
func spec05B(dtype safetensors.DType) spec {
	return spec{hidden: 896, inter: 4864, layers: 24, heads: 14, kv: 2, vocab: 151936, maxPos: 32768, theta: 1e6, tied: true, dtype: dtype, seed: 1}
}

// rng is xorshift64*: the 0.5B checkpoint needs half a billion values fast, and the tests need
// nothing more than reproducible noise.
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*r = rng(x)
	return x * 2685821657736338717
}

// uniform returns a value in [-a, a).
func (r *rng) uniform(a float32) float32 {
	return (float32(r.next()>>40)/float32(1<<24)*2 - 1) * a
}

// tensorsOf lists the checkpoint's tensors in Hugging Face order.
func (sp spec) tensorsOf() []safetensors.TensorInfo {
	hd := sp.hidden / sp.heads
	qd, kvd := sp.heads*hd, sp.kv*hd
	var ts []safetensors.TensorInfo
	add := func(name string, shape ...int) {
		ts = append(ts, safetensors.TensorInfo{Name: name, DType: sp.dtype, Shape: shape})
	}
	add("model.embed_tokens.weight", sp.vocab, sp.hidden)
	for l := range sp.layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", sp.hidden)
		add(p+"mlp.down_proj.weight", sp.hidden, sp.inter)
		add(p+"mlp.gate_proj.weight", sp.inter, sp.hidden)
		add(p+"mlp.up_proj.weight", sp.inter, sp.hidden)
		add(p+"post_attention_layernorm.weight", sp.hidden)
		add(p+"self_attn.k_proj.bias", kvd)
		add(p+"self_attn.k_proj.weight", kvd, sp.hidden)
		add(p+"self_attn.o_proj.weight", sp.hidden, qd)
		add(p+"self_attn.q_proj.bias", qd)
		add(p+"self_attn.q_proj.weight", qd, sp.hidden)
		add(p+"self_attn.v_proj.bias", kvd)
		add(p+"self_attn.v_proj.weight", kvd, sp.hidden)
	}
	add("model.norm.weight", sp.hidden)
	if !sp.tied {
		add("lm_head.weight", sp.vocab, sp.hidden)
	}
	for i := range ts {
		if d, ok := sp.override[ts[i].Name]; ok {
			ts[i].DType = d
		}
	}
	return ts
}

// configJSON is the config.json of the spec.
func (sp spec) configJSON() map[string]any {
	return map[string]any{
		"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2", "hidden_act": "silu",
		"hidden_size": sp.hidden, "intermediate_size": sp.inter, "num_hidden_layers": sp.layers,
		"num_attention_heads": sp.heads, "num_key_value_heads": sp.kv, "vocab_size": sp.vocab,
		"max_position_embeddings": sp.maxPos, "rope_theta": sp.theta, "rms_norm_eps": 1e-6,
		"tie_word_embeddings": sp.tied, "use_sliding_window": false, "bos_token_id": 1, "eos_token_id": 2,
		"torch_dtype": map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16"}[sp.dtype],
	}
}

func writeJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, js, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// writeCheckpoint writes config.json, generation_config.json and random weights (norm weights
// near 1, everything else uniform with std 0.02, biases larger so they matter) to dir.
func writeCheckpoint(tb testing.TB, dir string, sp spec) {
	tb.Helper()
	writeJSON(tb, filepath.Join(dir, "config.json"), sp.configJSON())
	writeJSON(tb, filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": []int{2, 3}, "bos_token_id": 1})
	ts := sp.tensorsOf()
	shards := max(sp.shards, 1)
	per := (len(ts) + shards - 1) / shards
	weightMap := map[string]string{}
	for s := range shards {
		part := ts[min(s*per, len(ts)):min((s+1)*per, len(ts))]
		name := safetensors.SingleFile
		if shards > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		}
		for _, t := range part {
			weightMap[t.Name] = name
		}
		if err := writeShard(filepath.Join(dir, name), part, sp.seed); err != nil {
			tb.Fatal(err)
		}
	}
	if shards > 1 {
		writeJSON(tb, filepath.Join(dir, safetensors.IndexFile), map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	}
}

// writeShard writes one safetensors file of random tensors, streaming each tensor in small
// chunks so that writing the 0.5B checkpoint does not raise the process's peak memory.
func writeShard(path string, ts []safetensors.TensorInfo, seed uint64) error {
	hdr, err := safetensors.EncodeHeader(ts, map[string]string{"format": "pt"})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	w.Write(hdr)
	for i := range ts {
		writeRandom(w, &ts[i], seed)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeRandom writes the tensor's little-endian bytes, seeded by the spec seed and the name.
func writeRandom(w *bufio.Writer, t *safetensors.TensorInfo, seed uint64) {
	r := rng(seed*0x9e3779b97f4a7c15 + 1)
	for _, c := range t.Name {
		r = rng(uint64(r)*31 + uint64(c) + 1)
	}
	r.next()
	n := int(t.Elements())
	isNorm := len(t.Shape) == 1 && filepath.Ext(t.Name) == ".weight"
	isBias := filepath.Ext(t.Name) == ".bias"
	val := func() float32 {
		switch {
		case isNorm:
			return 1 + r.uniform(0.2)
		case isBias:
			return r.uniform(0.5)
		}
		return r.uniform(float32(0.02 * math.Sqrt(3))) // std 0.02
	}
	var b [8]byte // bufio.Writer keeps the first write error; writeShard reports it at Flush
	for range n {
		switch t.DType {
		case safetensors.F32:
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(val()))
			w.Write(b[:4])
		case safetensors.BF16:
			binary.LittleEndian.PutUint16(b[:], cpu.F32ToBF16(val()))
			w.Write(b[:2])
		case safetensors.F16:
			binary.LittleEndian.PutUint16(b[:], f32ToF16(val()))
			w.Write(b[:2])
		default: // other dtypes only appear in tests of bad files; their bytes do not matter
			w.Write(b[:t.DType.Size()])
		}
	}
}

// f32ToF16 rounds to the nearest IEEE half (ties away from zero; enough for test weights, which
// are finite and well inside the half range).
func f32ToF16(f float32) uint16 {
	sign := uint16(0)
	if f < 0 {
		sign, f = 0x8000, -f
	}
	if f < 1.0/(1<<14) { // subnormal: multiples of 2^-24
		return sign | uint16(math.Round(float64(f)*(1<<24)))
	}
	e := math.Floor(math.Log2(float64(f)))
	m := math.Round((float64(f)/math.Exp2(e) - 1) * 1024)
	if m == 1024 {
		m, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}
