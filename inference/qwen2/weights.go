package qwen2

import "github.com/chainedsql/chainedsql/inference/cpu"

// Weights are a loaded model's tensors, for backends that copy them elsewhere (inference/cuda
// uploads them to the device). The slices and matrices are the model's own: read them only, and
// only until Close.
type Weights struct {
	Embed  *cpu.Matrix // vocab × hidden
	LMHead *cpu.Matrix // vocab × hidden; the same matrix as Embed when the embeddings are tied
	Norm   []float32   // the final RMSNorm's weight
	Layers []LayerWeights
}

// LayerWeights are one decoder layer's tensors (PyTorch Linear layout, out × in).
type LayerWeights struct {
	AttnNorm, MLPNorm []float32
	Q, K, V, O        *cpu.Matrix
	QBias, KBias      []float32
	VBias             []float32
	Gate, Up, Down    *cpu.Matrix
}

// Weights returns the model's tensors.
func (m *Model) Weights() Weights {
	w := Weights{Embed: m.embed, LMHead: m.lmHead, Norm: m.norm, Layers: make([]LayerWeights, len(m.layers))}
	for i := range m.layers {
		ly := &m.layers[i]
		w.Layers[i] = LayerWeights{
			AttnNorm: ly.attnNorm, MLPNorm: ly.mlpNorm,
			Q: ly.q, K: ly.k, V: ly.v, O: ly.o,
			QBias: ly.qb, KBias: ly.kb, VBias: ly.vb,
			Gate: ly.gate, Up: ly.up, Down: ly.down,
		}
	}
	return w
}

// InvFreq returns RoPE's inverse frequencies (head_dim/2 values, as Hugging Face computes them).
func (m *Model) InvFreq() []float32 { return append([]float32(nil), m.invFreq...) }
