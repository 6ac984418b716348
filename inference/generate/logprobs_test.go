package generate_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/generate/gentest"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// tinyReference reads, for the last of tinyIDs' positions, llama.cpp's ten largest logits and
// the log of the sum of the exponentials of all of them (reference_logits.json).
func tinyReference(t *testing.T, dir string) (top [][2]float64, logsumexp float64) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "reference_logits.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ref struct {
		Positions []struct {
			Logsumexp float64      `json:"logsumexp"`
			Top10     [][2]float64 `json:"top10"`
		} `json:"positions"`
	}
	if err := json.NewDecoder(f).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Positions) != len(tinyIDs) {
		t.Fatalf("reference has %d positions, want %d", len(ref.Positions), len(tinyIDs))
	}
	last := ref.Positions[len(tinyIDs)-1]
	return last.Top10, last.Logsumexp
}

// TestTinyLogProbsReference: the greedy first token after tinyIDs, its log-probability and the
// ten most likely tokens with theirs are llama.cpp's, from its logits: logit − logsumexp.
func TestTinyLogProbsReference(t *testing.T) {
	dir, m := loadTiny(t)
	top, lse := tinyReference(t, dir)
	g := newGen(t, m, generate.Config{})
	res, err := g.Generate(context.Background(), generate.Request{Prompt: tinyIDs, MaxTokens: 1, IgnoreEOS: true, LogProbs: true, TopLogProbs: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 1 || len(res.LogProbs) != 1 || len(res.TopLogProbs) != 1 || len(res.TopLogProbs[0]) != 10 {
		t.Fatalf("result %+v", res)
	}
	if res.Tokens[0] != int(top[0][0]) || math.Abs(float64(res.LogProbs[0])-(top[0][1]-lse)) > 1e-4 {
		t.Fatalf("token %d log-prob %v; reference %v %v", res.Tokens[0], res.LogProbs[0], top[0][0], top[0][1]-lse)
	}
	for j, e := range res.TopLogProbs[0] {
		if e.ID != int(top[j][0]) || math.Abs(float64(e.LogProb)-(top[j][1]-lse)) > 1e-4 {
			t.Errorf("top %d: %+v; reference id %v log-prob %v", j, e, top[j][0], top[j][1]-lse)
		}
	}
}

// logSoftmax is the log-softmax of l/T in float64, written out independently of the sampler.
func logSoftmax(l []float32, temp float64) []float64 {
	if temp <= 0 {
		temp = 1
	}
	m := math.Inf(-1)
	for _, v := range l {
		m = max(m, float64(v)/temp)
	}
	z := 0.0
	for _, v := range l {
		z += math.Exp(float64(v)/temp - m)
	}
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v)/temp - m - math.Log(z)
	}
	return out
}

// checkLogProbs checks res's log-probabilities and top tokens against the log-softmax of the
// logits that one plain Forward of prompt and res.Tokens gives at each generated position,
// divided by temp, plus bias: each within 1e-4, the top entries falling and no other token
// above the last of them.
func checkLogProbs(t *testing.T, m lm.Model, prompt []int, res generate.Result, temp float64, top int, bias map[int]float32) {
	t.Helper()
	all := append(slices.Clone(prompt), res.Tokens...)
	c, err := m.NewCache(len(all))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	st := []lm.Step{{Cache: c, Tokens: all, AllLogits: true}}
	if err := m.Forward(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	v := m.VocabSize()
	if len(res.LogProbs) != len(res.Tokens) || (top > 0 && len(res.TopLogProbs) != len(res.Tokens)) {
		t.Fatalf("%d tokens, %d log-probs, %d top lists", len(res.Tokens), len(res.LogProbs), len(res.TopLogProbs))
	}
	for i, tok := range res.Tokens {
		row := slices.Clone(st[0].Logits[(len(prompt)-1+i)*v : (len(prompt)+i)*v])
		for id, b := range bias {
			row[id] += b
		}
		want := logSoftmax(row, temp)
		if d := math.Abs(float64(res.LogProbs[i]) - want[tok]); d > 1e-4 {
			t.Fatalf("token %d (%d) at T=%g: log-prob %v, log-softmax %v", i, tok, temp, res.LogProbs[i], want[tok])
		}
		if top == 0 {
			continue
		}
		entries := res.TopLogProbs[i]
		if len(entries) != top {
			t.Fatalf("token %d: %d top entries, want %d", i, len(entries), top)
		}
		in := map[int]bool{}
		for j, e := range entries {
			in[e.ID] = true
			if math.Abs(float64(e.LogProb)-want[e.ID]) > 1e-4 || (j > 0 && e.LogProb > entries[j-1].LogProb) {
				t.Fatalf("token %d top %d: %+v, log-softmax %v", i, j, e, want[e.ID])
			}
			if e.ID == tok && e.LogProb != res.LogProbs[i] {
				t.Fatalf("token %d: sampled log-prob %v, %v among the top", i, res.LogProbs[i], e.LogProb)
			}
		}
		floor := float64(entries[top-1].LogProb)
		for id, lp := range want {
			if !in[id] && lp > floor+1e-4 {
				t.Fatalf("token %d: id %d (log-prob %v) is missing from the top %d (last %v)", i, id, lp, top, floor)
			}
		}
	}
}

// TestTinyLogProbs: on the tiny checkpoint, greedy and sampled at temperatures 0.7 and 1.3 (with
// top-p, which must not change the values), each token's log-probability and top tokens are the
// log-softmax of the model's own logits divided by the temperature, over the whole vocabulary;
// streamed through NextTokens they are the result's; a logit bias is in them.
func TestTinyLogProbs(t *testing.T) {
	_, m := loadTiny(t)
	g := newGen(t, m, generate.Config{StopIDs: m.EOS()})
	prompt := tinyShared(1, 20, 5)[0]
	for _, c := range []struct {
		temp, topP float64
		bias       map[int]float32
	}{{0, 0, nil}, {0.7, 0.9, nil}, {1.3, 0, nil}, {1, 0, map[int]float32{9707: 3, 11: -2}}} {
		req := generate.Request{Prompt: prompt, MaxTokens: 10, IgnoreEOS: true, Temperature: c.temp, TopP: c.topP, Seed: 7,
			LogProbs: true, TopLogProbs: 4, LogitBias: c.bias}
		s, err := g.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var streamed []generate.Token
		for {
			toks, err := s.NextTokens(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			streamed = append(streamed, toks...)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkLogProbs(t, m, prompt, res, c.temp, 4, c.bias)
		if len(streamed) != len(res.Tokens) {
			t.Fatalf("T=%g: %d tokens streamed, %d in the result", c.temp, len(streamed), len(res.Tokens))
		}
		for i, tk := range streamed {
			if tk.ID != res.Tokens[i] || tk.LogProb != res.LogProbs[i] || !slices.Equal(tk.Top, res.TopLogProbs[i]) {
				t.Fatalf("T=%g token %d: streamed %+v, result %d %v %v", c.temp, i, tk, res.Tokens[i], res.LogProbs[i], res.TopLogProbs[i])
			}
		}
	}
}

// TestLogitBiasSteers: a bias of -100 on the greedy token makes greedy decoding pick another; +100
// on a token makes every step pick it, greedy or sampled, with a log-probability of about 0
// (the biased distribution's); a bias outside the vocabulary or not finite is refused.
func TestLogitBiasSteers(t *testing.T) {
	toy := gentest.NewToy(64, 512)
	g := newGen(t, toy, generate.Config{})
	ctx := context.Background()
	prompt := seq(3, 9)
	plain, err := g.Generate(ctx, generate.Request{Prompt: prompt, MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	first := plain.Tokens[0]
	res, err := g.Generate(ctx, generate.Request{Prompt: prompt, MaxTokens: 6, LogitBias: map[int]float32{first: -100}})
	if err != nil || res.Tokens[0] == first {
		t.Fatalf("-100 on %d: %v %v", first, res.Tokens, err)
	}
	for _, temp := range []float64{0, 1} {
		res, err = g.Generate(ctx, generate.Request{Prompt: prompt, MaxTokens: 6, Temperature: temp, Seed: 1, LogProbs: true, LogitBias: map[int]float32{41: 100}})
		if err != nil || !slices.Equal(res.Tokens, []int{41, 41, 41, 41, 41, 41}) {
			t.Fatalf("T=%g, +100 on 41: %v %v", temp, res.Tokens, err)
		}
		for _, lp := range res.LogProbs {
			if lp < -1e-3 {
				t.Fatalf("T=%g: forced token's log-prob %v", temp, lp)
			}
		}
	}
	for _, bias := range []map[int]float32{{64: 1}, {-1: 1}, {3: float32(math.NaN())}, {3: float32(math.Inf(1))}} {
		if _, err := g.Start(ctx, generate.Request{Prompt: prompt, LogitBias: bias}); !errors.Is(err, generate.ErrInvalidRequest) {
			t.Errorf("bias %v: %v, want an invalid request", bias, err)
		}
	}
	if _, err := g.Start(ctx, generate.Request{Prompt: prompt, TopLogProbs: 2}); !errors.Is(err, generate.ErrInvalidRequest) {
		t.Errorf("top log-probs without log-probs: %v, want an invalid request", err)
	}
}

// nanModel is a Toy whose logits are all NaN from position nanFrom on, as a checkpoint holding
// NaN (a diverged training step) computes them.
type nanModel struct {
	*gentest.Toy
	nanFrom int
}

func (m nanModel) Forward(ctx context.Context, steps []lm.Step) error {
	lens := make([]int, len(steps))
	for i, st := range steps {
		lens[i] = st.Cache.Len()
	}
	if err := m.Toy.Forward(ctx, steps); err != nil {
		return err
	}
	for i, st := range steps {
		if lens[i]+len(st.Tokens) > m.nanFrom {
			for j := range st.Logits {
				st.Logits[j] = float32(math.NaN())
			}
		}
	}
	return nil
}

// TestNaNLogitsFailWithLogProbs: logits that are not finite fail a request asking for
// log-probabilities with an error that says so, greedy and sampled, with and without top
// log-probabilities, instead of reporting NaN (which student serve could not encode: measured,
// a connection dropped without a reply); a request without them is answered as before.
func TestNaNLogitsFailWithLogProbs(t *testing.T) {
	prompt := []int{1, 2, 3}
	for _, c := range []struct {
		temp float64
		top  int
	}{{0, 0}, {0, 3}, {1, 0}, {0.7, 5}} {
		g := newGen(t, nanModel{gentest.NewToy(64, 256), len(prompt) + 2}, generate.Config{})
		res, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Temperature: c.temp, LogProbs: true, TopLogProbs: c.top})
		if err == nil || !strings.Contains(err.Error(), "not finite") {
			t.Fatalf("temperature %v top %d: err %v, log-probs %v; want an error naming logits that are not finite", c.temp, c.top, err, res.LogProbs)
		}
		if _, err := g.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Temperature: c.temp}); err != nil {
			t.Fatalf("temperature %v without log-probs: %v", c.temp, err)
		}
	}
}
