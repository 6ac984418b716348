package serve_test

import (
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
)

// TestReadGenerationConfig: the fields of generation_config.json that vLLM's
// --generation-config auto takes are read as it reads them (null as unset, top_k -1 as no
// cut), the ones this server cannot apply are named with their values unless neutral,
// do_sample is reported, and a field of the wrong type or out of range is refused naming it;
// a directory without the file gives nothing.
func TestReadGenerationConfig(t *testing.T) {
	f, i, yes, no := func(v float64) *float64 { return &v }, func(v int) *int { return &v }, true, false
	for _, c := range []struct {
		name, file string
		want       serve.GenerationConfig // Path is filled in
		taken      []string
		err        string
	}{
		{name: "Qwen2.5-Instruct's", file: `{"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
			"repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"}`,
			want:  serve.GenerationConfig{Temperature: f(0.7), TopP: f(0.8), TopK: i(20), Unsupported: []string{"repetition_penalty 1.05"}, DoSample: &yes},
			taken: []string{"temperature 0.7", "top_p 0.8", "top_k 20"}},
		{name: "tokens only, greedy", file: `{"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": false}`,
			want: serve.GenerationConfig{DoSample: &no}},
		{name: "nulls, no cut, neutral unsupported, max_new_tokens", file: `{"temperature": null, "top_p": 1.0, "top_k": -1, "max_new_tokens": 512,
			"repetition_penalty": 1.0, "min_p": 0.05}`,
			want:  serve.GenerationConfig{TopP: f(1), TopK: i(0), MaxNewTokens: i(512), Unsupported: []string{"min_p 0.05"}},
			taken: []string{"top_p 1", "top_k 0", "max_new_tokens 512"}},
		{name: "greedy temperature", file: `{"temperature": 0}`, want: serve.GenerationConfig{Temperature: f(0)}, taken: []string{"temperature 0"}},
		{name: "temperature a string", file: `{"temperature": "hot"}`, err: `temperature: "hot" is not a number`},
		{name: "top_k a fraction", file: `{"top_k": 2.5}`, err: "top_k: 2.5 is not a whole number"},
		{name: "do_sample a number", file: `{"do_sample": 1}`, err: "do_sample: 1 is not a boolean"},
		{name: "negative temperature", file: `{"temperature": -0.5}`, err: "temperature -0.5 is out of range"},
		{name: "top_p 0", file: `{"top_p": 0}`, err: "top_p 0 is out of range"},
		{name: "whole numbers written as floats", file: `{"top_k": 20.0, "max_new_tokens": 3.0}`,
			want: serve.GenerationConfig{TopK: i(20), MaxNewTokens: i(3)}, taken: []string{"top_k 20", "max_new_tokens 3"}},
		{name: "temperature above a request's 2", file: `{"temperature": 5}`, err: "temperature 5 is out of range"},
		{name: "temperature past float64", file: `{"temperature": 1e400}`, err: "temperature 1e400 is out of range"},
		{name: "top_k past int", file: `{"top_k": 1e12}`, err: "top_k 1e12 is out of range"},
		{name: "top_p above 1", file: `{"top_p": 1.5}`, err: "top_p 1.5 is out of range"},
		{name: "top_k -2", file: `{"top_k": -2}`, err: "top_k -2 is out of range"},
		{name: "max_new_tokens 0", file: `{"max_new_tokens": 0}`, err: "max_new_tokens 0 is out of range"},
		{name: "not an object", file: `[1]`, err: "generation_config.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, serve.GenerationConfigFile)
			if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := serve.ReadGenerationConfig(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("error %v, want one naming %s and saying %q", err, path, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.want.Path = path
			if !reflect.DeepEqual(g, c.want) {
				t.Fatalf("read %+v, want %+v", g, c.want)
			}
			if !slices.Equal(g.Taken(), c.taken) {
				t.Fatalf("taken %q, want %q", g.Taken(), c.taken)
			}
		})
	}
	g, err := serve.ReadGenerationConfig(t.TempDir())
	if err != nil || !reflect.DeepEqual(g, serve.GenerationConfig{}) {
		t.Fatalf("no file: %+v %v", g, err)
	}
}

// TestGenerationConfigApply: the file's fields replace the defaults' and only those; the
// start-up note names what was taken, what is not applied and an unread do_sample false.
func TestGenerationConfigApply(t *testing.T) {
	temp, topK := 0.7, 20
	g := serve.GenerationConfig{Path: "/m/generation_config.json", Temperature: &temp, TopK: &topK, Unsupported: []string{"repetition_penalty 1.05"}}
	if d := g.Apply(serve.NeutralDefaults); d != (serve.Defaults{Temperature: 0.7, TopP: 1, TopK: 20}) {
		t.Fatalf("applied: %+v", d)
	}
	if d := (serve.GenerationConfig{}).Apply(serve.NeutralDefaults); d != serve.NeutralDefaults || d.String() != "temperature 1, top_p 1, top_k off" {
		t.Fatalf("nothing applied: %+v %q", d, d)
	}
	if note := g.Note(); note != "from /m/generation_config.json: temperature 0.7, top_k 20; not applied (this server has no such setting): repetition_penalty 1.05" {
		t.Fatalf("note %q", note)
	}
	no := false
	if note := (serve.GenerationConfig{Path: "/m/generation_config.json", DoSample: &no}).Note(); !strings.Contains(note, "sets none of") || !strings.Contains(note, "do_sample false is not read") {
		t.Fatalf("note %q", note)
	}
	if note := (serve.GenerationConfig{}).Note(); !strings.Contains(note, "has no generation_config.json") {
		t.Fatalf("note %q", note)
	}
}

// with returns e answering through another handler over the same student, configured by cfg.
func (e *tinyLP) with(t *testing.T, cfg serve.Config) *tinyLP {
	t.Helper()
	srv := httptest.NewServer(serve.Handler(e.st, nil, cfg))
	t.Cleanup(srv.Close)
	c := *e
	c.url = srv.URL
	return &c
}

// contents are the choices' texts.
func contents(cs []lpChoice) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Content
	}
	return out
}

// distinct counts the different texts among cs.
func distinct(cs []lpChoice) int {
	return len(slices.Compact(slices.Sorted(slices.Values(contents(cs)))))
}

// TestDefaultsTiny, on the tiny checkpoint through the HTTP handler: a request that leaves
// temperature, top_p and top_k out (or sends null) samples with the server's defaults, and one
// that sends them samples with its own. By default (OpenAI's and vLLM's neutral defaults) n
// choices without a temperature are drawn at temperature 1, not copies of one greedy reply; a
// server whose defaults are temperature 0.7 and top_p 0.9 answers exactly as a request sending
// them, with log-probabilities at 0.7; under a default top_k of 1 (greedy) a request's top_k 0
// or -1 (vLLM's "no cut") samples again, and -2 is refused.
func TestDefaultsTiny(t *testing.T) {
	e := newTinyLP(t, generate.Config{MaxBatch: 8, CacheTokens: -1}) // no kept caches: draws repeat exactly
	// Neutral: temperature 1.
	cs, _ := e.complete(t, e.body(t, map[string]any{"n": 4, "seed": 5, "logprobs": true}))
	for _, c := range cs {
		e.check(t, c, 1, 0, nil)
	}
	if distinct(cs) < 3 {
		t.Fatalf("n=4 without a temperature: %q, want independent draws", contents(cs))
	}
	if g, _ := e.complete(t, e.body(t, map[string]any{"n": 3, "temperature": 0})); distinct(g) != 1 {
		t.Fatalf("n=3 at temperature 0: %q", contents(g))
	}

	warm := e.with(t, serve.Config{Defaults: &serve.Defaults{Temperature: 0.7, TopP: 0.9}})
	left, _ := warm.complete(t, warm.body(t, map[string]any{"seed": 7, "logprobs": true, "top_logprobs": 2}))
	warm.check(t, left[0], 0.7, 2, nil)
	sent, _ := e.complete(t, e.body(t, map[string]any{"seed": 7, "logprobs": true, "top_logprobs": 2, "temperature": 0.7, "top_p": 0.9}))
	sameEntries(t, "defaults 0.7/0.9 and a request sending them", left[0], sent[0], 1e-5)
	nulls, _ := warm.complete(t, warm.body(t, map[string]any{"seed": 7, "logprobs": true, "top_logprobs": 2, "temperature": nil, "top_p": nil, "top_k": nil}))
	sameEntries(t, "absent and null", left[0], nulls[0], 1e-5)
	own, _ := warm.complete(t, warm.body(t, map[string]any{"seed": 7, "logprobs": true, "temperature": 1.5}))
	warm.check(t, own[0], 1.5, 0, nil)

	topOne := e.with(t, serve.Config{Defaults: &serve.Defaults{Temperature: 1, TopP: 1, TopK: 1}})
	if g, _ := topOne.complete(t, topOne.body(t, map[string]any{"n": 3, "seed": 5})); distinct(g) != 1 {
		t.Fatalf("default top_k 1, n=3: %q, want one greedy reply", contents(g))
	}
	zero, _ := topOne.complete(t, topOne.body(t, map[string]any{"n": 4, "seed": 5, "top_k": 0}))
	minus, _ := topOne.complete(t, topOne.body(t, map[string]any{"n": 4, "seed": 5, "top_k": -1}))
	if distinct(zero) < 3 || !slices.Equal(contents(zero), contents(minus)) || !slices.Equal(contents(zero), contents(cs)) {
		t.Fatalf("top_k 0: %q; top_k -1: %q; want the neutral server's draws %q", contents(zero), contents(minus), contents(cs))
	}
	code, out := post(t, topOne.url, topOne.body(t, map[string]any{"top_k": -2}))
	if er, _ := out["error"].(map[string]any); code != 400 || er == nil || er["param"] != "top_k" || !strings.Contains(er["message"].(string), "below -1") {
		t.Fatalf("top_k -2: %d %v", code, out)
	}
}

// fromIDs checks that every token of c's entries, and of their top_logprobs, is written
// "token_id:ID" with ID the token whose bytes the entry carries, and returns c with the tokens
// as text again (the tokenizer's decoding of ID alone), to compare with a reply without
// return_tokens_as_token_ids.
func (e *tinyLP) fromIDs(t *testing.T, c lpChoice) lpChoice {
	t.Helper()
	name := func(token string, bytes []int) string {
		t.Helper()
		b := make([]byte, len(bytes))
		for i, v := range bytes {
			b[i] = byte(v)
		}
		id, ok := e.ids[string(b)]
		if !ok || token != "token_id:"+strconv.Itoa(id) {
			t.Fatalf("token %q with bytes %v: want token_id:%d", token, bytes, id)
		}
		return e.tok.Decode([]int{id})
	}
	out := c
	out.Entries = slices.Clone(c.Entries)
	for i, en := range out.Entries {
		en.Token = name(en.Token, en.Bytes)
		en.Top = slices.Clone(en.Top)
		for j := range en.Top {
			en.Top[j].Token = name(en.Top[j].Token, en.Top[j].Bytes)
		}
		out.Entries[i] = en
	}
	return out
}

// TestTokenIDsTiny: return_tokens_as_token_ids with logprobs names every token and top token
// "token_id:ID", streamed and not, with the values and bytes of the same reply without it;
// without logprobs it changes nothing; the server's default (TokenIDs, --return-tokens-as-
// token-ids) applies to a request that leaves it out and a request's false overrides it; a
// value that is not a boolean is refused.
func TestTokenIDsTiny(t *testing.T) {
	e := newTinyLP(t, generate.Config{})
	base := map[string]any{"seed": 9, "logprobs": true, "top_logprobs": 3, "n": 2}
	with := func(m map[string]any, k string, v any) map[string]any {
		m = maps.Clone(m)
		m[k] = v
		return m
	}
	text, _ := e.complete(t, e.body(t, base))
	ids, _ := e.complete(t, e.body(t, with(base, "return_tokens_as_token_ids", true)))
	streamed, _ := e.stream(t, e.body(t, with(base, "return_tokens_as_token_ids", true)))
	if len(ids) != 2 || len(streamed) != 2 {
		t.Fatalf("%d and %d streamed choices", len(ids), len(streamed))
	}
	for i := range ids {
		if len(ids[i].Entries) == 0 || len(ids[i].Entries[0].Top) != 3 {
			t.Fatalf("choice %d: entries %+v", i, ids[i].Entries)
		}
		sameEntries(t, "token ids and text", e.fromIDs(t, ids[i]), text[i], 0)
		sameEntries(t, "token ids streamed and not", streamed[i], ids[i], 1e-5)
	}
	plain, _ := e.complete(t, e.body(t, map[string]any{"seed": 9, "return_tokens_as_token_ids": true}))
	if !plain[0].null || plain[0].Content != text[0].Content {
		t.Fatalf("without logprobs: %+v, want %q and null logprobs", plain[0], text[0].Content)
	}

	byDefault := e.with(t, serve.Config{TokenIDs: true})
	left, _ := byDefault.complete(t, byDefault.body(t, base))
	sameEntries(t, "the server's default and the request's", left[0], ids[0], 0)
	off, _ := byDefault.complete(t, byDefault.body(t, with(base, "return_tokens_as_token_ids", false)))
	sameEntries(t, "a request's false over the server's default", off[0], text[0], 0)

	code, out := post(t, e.url, e.body(t, with(base, "return_tokens_as_token_ids", "yes")))
	if code != 400 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "return_tokens_as_token_ids") {
		t.Fatalf("a string: %d %v", code, out)
	}
}
