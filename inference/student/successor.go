package student

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// ErrIncompatible is wrapped by Successor's refusal of weights that are not the same model as
// the serving one (another architecture, vocabulary, tokenizer or stop tokens).
var ErrIncompatible = errors.New("the checkpoint is not the serving model")

// Successor loads the weights in dir (a Hugging Face directory as Open takes, e.g. what a
// trainer's save_pretrained wrote) as a new Student to replace s: same model id, sampling
// defaults, tokenizer and stop tokens, on the backend and weight type of opts, with opts.Generate
// for its scheduler. It refuses, wrapping ErrIncompatible, a checkpoint whose config differs from
// s's in any field that shapes the computation, or whose tokenizer.json (when dir has one) has
// another vocabulary. s is unchanged and keeps serving. Every file it reads is opened through
// opts.Opener (a server's reload: confined to its weights root).
func (s *Student) Successor(dir string, opts Options) (*Student, error) {
	if st, err := opts.Opener.Stat(dir); err != nil {
		return nil, fmt.Errorf("student: weights directory: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("student: weights directory %s is not a directory", dir)
	}
	if err := regularFiles(dir, opts.Opener); err != nil {
		return nil, err
	}
	cur, ok := s.gen.Model().(Model)
	if !ok {
		return nil, fmt.Errorf("student: the serving model (%T) was not loaded from a directory", s.gen.Model())
	}
	if tokPath := filepath.Join(dir, "tokenizer.json"); fileExists(tokPath, opts.Opener) {
		tok, err := tokenizer.LoadWith(tokPath, opts.Opener)
		if err != nil {
			return nil, fmt.Errorf("student: %w", err)
		}
		if err := sameVocab(s.tok, tok); err != nil {
			return nil, fmt.Errorf("student: %s: %w: %w", tokPath, ErrIncompatible, err)
		}
	}
	m, err := LoadModel(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := sameModel(cur, m); err != nil {
		m.Close()
		return nil, fmt.Errorf("student: %s: %w: %w", dir, ErrIncompatible, err)
	}
	next, err := New(m, s.tok, Config{ModelID: s.id, Sampling: s.sampling, StopIDs: stopIDs(m, s.tok), Generate: opts.Generate})
	if err != nil {
		m.Close()
		return nil, err
	}
	next.closers = append(next.closers, m.Close)
	return next, nil
}

// regularFiles refuses a directory whose .json or .safetensors entries (the files a load reads)
// are not all regular files once their links are followed: opening a FIFO waits for a writer,
// so a reload of one never ended and every later reload was refused as in progress, and
// reading a link to /dev/zero never ends. A dangling link is left for the load to name. dir and
// its entries are looked at through o, as the load opens them.
func regularFiles(dir string, o *regular.Opener) error {
	entries, err := o.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("student: weights directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") && !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		st, err := o.Stat(filepath.Join(dir, name))
		if errors.Is(err, regular.ErrOutsideRoot) {
			return fmt.Errorf("student: %w", err)
		}
		if err != nil || st.Mode().IsRegular() {
			continue
		}
		return fmt.Errorf("student: weights directory %s: %s is not a regular file (%s)", dir, name, st.Mode().Type())
	}
	return nil
}

// fileExists says whether path, looked at through o, is there (or cannot be told missing: the
// open then says why).
func fileExists(path string, o *regular.Opener) bool {
	_, err := o.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// configured is a model that reports its config.json (qwen2 and cuda models).
type configured interface{ Config() qwen2.Config }

// sameModel says how next differs from cur in what shapes the computation.
func sameModel(cur, next Model) error {
	if cur.VocabSize() != next.VocabSize() {
		return fmt.Errorf("vocab_size %d, serving %d", next.VocabSize(), cur.VocabSize())
	}
	if a, b := cur.EOS(), next.EOS(); !slices.Equal(a, b) {
		return fmt.Errorf("eos_token_id %v, serving %v", b, a)
	}
	cc, ok1 := cur.(configured)
	nc, ok2 := next.(configured)
	if !ok1 || !ok2 {
		return nil
	}
	a, b := cc.Config(), nc.Config()
	for _, f := range []struct {
		name      string
		cur, next any
	}{
		{"model_type", a.ModelType, b.ModelType},
		{"hidden_size", a.HiddenSize, b.HiddenSize},
		{"intermediate_size", a.IntermediateSize, b.IntermediateSize},
		{"num_hidden_layers", a.NumHiddenLayers, b.NumHiddenLayers},
		{"num_attention_heads", a.NumAttentionHeads, b.NumAttentionHeads},
		{"num_key_value_heads", a.NumKeyValueHeads, b.NumKeyValueHeads},
		{"head_dim", a.HeadDim, b.HeadDim},
		{"max_position_embeddings", a.MaxPositionEmbeddings, b.MaxPositionEmbeddings},
		{"rms_norm_eps", a.RMSNormEps, b.RMSNormEps},
		{"rope_theta", a.RopeTheta, b.RopeTheta},
		{"tie_word_embeddings", a.TieWordEmbeddings, b.TieWordEmbeddings},
		{"hidden_act", a.HiddenAct, b.HiddenAct},
		{"use_sliding_window", a.UseSlidingWindow, b.UseSlidingWindow},
		{"rope_scaling", string(a.RopeScaling), string(b.RopeScaling)},
	} {
		if f.cur != f.next {
			return fmt.Errorf("config.json %s is %v, serving %v (a reload replaces weights, not the architecture: restart the server for another model)", f.name, f.next, f.cur)
		}
	}
	return nil
}

// sameVocab says how next's vocabulary differs from cur's (compared when cur is a loaded
// tokenizer): the size and every added token's id.
func sameVocab(cur Tokenizer, next *tokenizer.Tokenizer) error {
	c, ok := cur.(*tokenizer.Tokenizer)
	if !ok {
		return nil
	}
	if c.VocabSize() != next.VocabSize() {
		return fmt.Errorf("%d tokens, serving %d", next.VocabSize(), c.VocabSize())
	}
	if a, b := c.AddedIDs(), next.AddedIDs(); !maps.Equal(a, b) {
		return fmt.Errorf("other added tokens (%d, serving %d)", len(b), len(a))
	}
	return nil
}
