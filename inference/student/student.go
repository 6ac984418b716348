// Package student is the bundled student runtime as a chat.Policy: it renders a conversation with
// the Qwen2.5 chat template, tokenizes it, generates through a generate.Generator (batched with
// every other request in flight, starting from the longest prefix of the prompt already in a KV
// cache: the conversation's previous turn, or the system prompt another conversation on the same
// database computed) and decodes the reply. Reply.Usage.CachedTokens is the prompt tokens reused.
package student

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/lm"
)

// Tokenizer is what the student needs of a tokenizer (*tokenizer.Tokenizer is one).
type Tokenizer interface {
	// Encode returns the ids of text, special tokens written in it recognised.
	Encode(text string) []int
	// Decode returns the text of ids.
	Decode(ids []int) string
	// TokenID returns the id of a token written as in tokenizer.json (e.g. "<|im_end|>").
	TokenID(tok string) (int, bool)
}

// Sampling is the default sampling of a Student, used where chat.Options leave a field unset.
type Sampling struct {
	// Temperature 0 is greedy decoding.
	Temperature float64
	TopP        float64
	TopK        int
	// MaxTokens bounds a reply (default 2048).
	MaxTokens int
}

// Config is how New builds a Student.
type Config struct {
	// ModelID names the model in replies and in /v1/models (default "student").
	ModelID string
	// Sampling holds the defaults for chat.Options fields left unset.
	Sampling Sampling
	// StopIDs end every reply; default the tokenizer's <|im_end|> and <|endoftext|>.
	StopIDs []int
	// Generate tunes the scheduler (its StopIDs are replaced by StopIDs).
	Generate generate.Config
}

// Student is a chat.Policy over a generator. It is safe for concurrent use.
type Student struct {
	gen      *generate.Generator
	tok      Tokenizer
	id       string
	sampling Sampling
	closers  []func() error
}

// New builds a Student over m and tok and starts its generator.
func New(m lm.Model, tok Tokenizer, cfg Config) (*Student, error) {
	if tok == nil {
		return nil, errors.New("student: nil tokenizer")
	}
	if cfg.ModelID == "" {
		cfg.ModelID = "student"
	}
	if cfg.Sampling.MaxTokens <= 0 {
		cfg.Sampling.MaxTokens = 2048
	}
	if cfg.StopIDs == nil {
		for _, t := range []string{chattmpl.ImEnd, "<|endoftext|>"} {
			if id, ok := tok.TokenID(t); ok {
				cfg.StopIDs = append(cfg.StopIDs, id)
			}
		}
		if len(cfg.StopIDs) == 0 {
			return nil, errors.New("student: the tokenizer has neither <|im_end|> nor <|endoftext|>; give the stop ids")
		}
	}
	gcfg := cfg.Generate
	gcfg.StopIDs = cfg.StopIDs
	g, err := generate.New(m, gcfg)
	if err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	return &Student{gen: g, tok: tok, id: cfg.ModelID, sampling: cfg.Sampling}, nil
}

// ModelID is the model's name in replies.
func (s *Student) ModelID() string { return s.id }

// Generator returns the student's generator (for its Stats).
func (s *Student) Generator() *generate.Generator { return s.gen }

// ClientStats returns the generator's counters (a generate.Stats: prompt, cached, shared and
// computed tokens, prefix hits, requests that waited for a shared prefix, evictions, KV memory),
// which distill writes into usage.json as the student policy's "client" entry.
func (s *Student) ClientStats() any { return s.gen.Stats() }

// Tokenizer returns the student's tokenizer.
func (s *Student) Tokenizer() Tokenizer { return s.tok }

// Close stops the generator and releases the model. Requests still running fail.
func (s *Student) Close() error {
	err := s.gen.Close()
	for _, c := range s.closers {
		err = errors.Join(err, c())
	}
	s.closers = nil
	return err
}

// Chat implements chat.Policy: the next assistant turn of msgs.
func (s *Student) Chat(ctx context.Context, msgs []chat.Message, opts chat.Options) (chat.Reply, error) {
	return s.Stream(ctx, msgs, opts, nil)
}

// Prompt returns the token ids the student feeds for msgs: the chat template's rendering with the
// generation prompt.
func (s *Student) Prompt(msgs []chat.Message) ([]int, error) {
	if err := chattmpl.Check(msgs); err != nil {
		return nil, fmt.Errorf("student: %w: %w", generate.ErrInvalidRequest, err)
	}
	text, _ := chattmpl.Render(msgs, true)
	return s.tok.Encode(text), nil
}

// Room returns the length of msgs' prompt and how many tokens the model's context leaves
// after it for the reply (serve.Room: student serve refuses a max_tokens over it).
func (s *Student) Room(msgs []chat.Message) (prompt, room int, err error) {
	ids, err := s.Prompt(msgs)
	if err != nil {
		return 0, 0, err
	}
	return len(ids), max(s.gen.Model().ContextLength()-len(ids), 0), nil
}

// Request turns opts into a generation request for prompt, filling unset fields from the
// student's defaults. Without a seed, the seed is a hash of the prompt, so the same
// conversation gets the same reply.
func (s *Student) Request(prompt []int, opts chat.Options) (generate.Request, error) {
	req := generate.Request{
		Prompt:      prompt,
		MaxTokens:   s.sampling.MaxTokens,
		Temperature: s.sampling.Temperature,
		TopP:        s.sampling.TopP,
		TopK:        s.sampling.TopK,
	}
	if opts.MaxTokens < 0 {
		return req, fmt.Errorf("student: %w: max_tokens %d is negative", generate.ErrInvalidRequest, opts.MaxTokens)
	}
	if opts.MaxTokens > 0 {
		req.MaxTokens = opts.MaxTokens
	}
	if opts.Temperature != nil {
		req.Temperature = *opts.Temperature
	}
	if opts.TopP != nil {
		req.TopP = *opts.TopP
	}
	if opts.TopK > 0 {
		req.TopK = opts.TopK
	}
	if opts.Seed != nil {
		req.Seed = *opts.Seed
	} else {
		h := fnv.New64a()
		var b [4]byte
		for _, id := range prompt {
			b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
			h.Write(b[:])
		}
		req.Seed = int64(h.Sum64())
	}
	for _, st := range opts.Stop {
		if st == "" {
			return req, fmt.Errorf("student: %w: empty stop string", generate.ErrInvalidRequest)
		}
	}
	return req, nil
}

// Stream is Chat that also calls fn with each piece of the reply's text as it is generated
// (fn may be nil). The pieces concatenate to Reply.Content. An error from fn ends the request
// and is returned.
func (s *Student) Stream(ctx context.Context, msgs []chat.Message, opts chat.Options, fn func(delta string) error) (chat.Reply, error) {
	start := time.Now()
	prompt, err := s.Prompt(msgs)
	if err != nil {
		return chat.Reply{}, err
	}
	req, err := s.Request(prompt, opts)
	if err != nil {
		return chat.Reply{}, err
	}
	seq, err := s.gen.Start(ctx, req)
	if err != nil {
		return chat.Reply{}, fmt.Errorf("student: %w", err)
	}
	defer seq.Cancel()
	ts := &textStream{tok: s.tok, stops: opts.Stop, emit: fn}
	for {
		ids, err := seq.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return chat.Reply{}, fmt.Errorf("student: %w", err)
		}
		hit, err := ts.add(ids)
		if err != nil {
			return chat.Reply{}, err
		}
		if hit {
			seq.Cancel()
			break
		}
	}
	res, err := seq.Wait()
	if err != nil && !(ts.stopped && errors.Is(err, context.Canceled)) {
		return chat.Reply{}, fmt.Errorf("student: %w", err)
	}
	if err := ts.flush(); err != nil {
		return chat.Reply{}, err
	}
	reason := chat.FinishStop
	if res.FinishReason == generate.FinishLength && !ts.stopped {
		reason = chat.FinishLength
	}
	completion := len(res.Tokens)
	if res.StopID >= 0 {
		completion++ // the stop token was generated too
	}
	if ts.stopped {
		completion = ts.ids
	}
	return chat.Reply{
		Content:      ts.text.String(),
		FinishReason: reason,
		Usage:        chat.Usage{PromptTokens: len(prompt), CompletionTokens: completion, CachedTokens: res.CachedTokens},
		Latency:      time.Since(start),
		Model:        s.id,
		Attempts:     1,
	}, nil
}

// textStream turns generated ids into text as they come: it holds back the bytes of a
// UTF-8 character split across tokens and any tail that may be the start of a stop string,
// and cuts the text at the first stop string.
type textStream struct {
	tok   Tokenizer
	stops []string
	emit  func(string) error

	pending []int           // ids not yet decoded into text (an incomplete character)
	held    string          // decoded text not yet emitted (may start a stop string)
	text    strings.Builder // everything emitted
	ids     int             // ids consumed
	stopped bool            // a stop string was found
}

// add consumes ids; it reports whether a stop string was found.
func (t *textStream) add(ids []int) (bool, error) {
	for _, id := range ids {
		t.ids++
		t.pending = append(t.pending, id)
		piece := t.tok.Decode(t.pending)
		if strings.HasSuffix(piece, string(utf8.RuneError)) && len(t.pending) < 4 {
			continue // wait for the rest of the character
		}
		t.pending = t.pending[:0]
		t.held += piece
		if hit, err := t.release(false); hit || err != nil {
			return hit, err
		}
	}
	return false, nil
}

// release emits what of held can no longer be part of a stop string (all of it when final).
func (t *textStream) release(final bool) (bool, error) {
	cut, keep := -1, 0
	for _, st := range t.stops {
		if i := strings.Index(t.held, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
		for k := min(len(st)-1, len(t.held)); k > keep; k-- {
			if strings.HasSuffix(t.held, st[:k]) {
				keep = k
				break
			}
		}
	}
	out := t.held
	switch {
	case cut >= 0:
		out, t.held, t.stopped = t.held[:cut], "", true
	case final:
		t.held = ""
	default:
		out, t.held = t.held[:len(t.held)-keep], t.held[len(t.held)-keep:]
	}
	if out != "" {
		t.text.WriteString(out)
		if t.emit != nil {
			if err := t.emit(out); err != nil {
				return false, err
			}
		}
	}
	return t.stopped, nil
}

// flush emits what is left at the end of generation.
func (t *textStream) flush() error {
	if t.stopped {
		return nil
	}
	if len(t.pending) > 0 {
		t.held += t.tok.Decode(t.pending)
		t.pending = nil
	}
	_, err := t.release(true)
	return err
}
