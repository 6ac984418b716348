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
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/turns"
)

// Tokenizer is what the student needs of a tokenizer (*tokenizer.Tokenizer is one).
type Tokenizer interface {
	// Encode returns the ids of text, special tokens written in it recognised (the template's
	// markers); EncodeSplitSpecial those of text with special tokens' text as plain text (a
	// message's content).
	turns.Encoder
	// Decode returns the text of ids: tokenizer.DecodeBytes of their TokenBytes concatenated
	// (a reply streamed is decoded that way, a character's bytes at a time).
	Decode(ids []int) string
	// TokenID returns the id of a token written as in tokenizer.json (e.g. "<|im_end|>").
	TokenID(tok string) (int, bool)
	// TokenBytes returns the bytes token id stands for ("" for an unknown id).
	TokenBytes(id int) string
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
	// StopIDs end every reply; default DefaultStops: every special token of the tokenizer.
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
	stopIDs  []int // Config.StopIDs: the student's own stops (special tokens), whose text no reply holds
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
		cfg.StopIDs = DefaultStops(tok)
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
	return &Student{gen: g, tok: tok, id: cfg.ModelID, sampling: cfg.Sampling, stopIDs: slices.Clone(cfg.StopIDs)}, nil
}

// DefaultStops are the ids that end a reply: the ChatML markers <|im_end|>, <|endoftext|> and
// <|im_start|>, and every other token the tokenizer marks special (when it lists them:
// SpecialIDs, as *tokenizer.Tokenizer does), in increasing order. A special token sampled
// inside a reply ends it, so a reply's text never holds one and its ids are those the text
// encodes back to: the next turn's prompt, rendered from the text, starts with the prompt and
// the ids generated (the KV cache's prefix), and a rollout's ids are the encoding of its
// conversation (docs/ROLLOUT.md, "Special tokens a reply samples").
func DefaultStops(tok Tokenizer) []int {
	var stops []int
	for _, t := range []string{chattmpl.ImEnd, "<|endoftext|>", chattmpl.ImStart} {
		if id, ok := tok.TokenID(t); ok {
			stops = append(stops, id)
		}
	}
	if sp, ok := tok.(interface{ SpecialIDs() map[string]int }); ok {
		for _, id := range sp.SpecialIDs() {
			stops = append(stops, id)
		}
	}
	slices.Sort(stops)
	return slices.Compact(stops)
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
// generation prompt, as turns.Prompt encodes it (the template's markers are control ids, the
// text of a special token inside a message's content is plain text).
func (s *Student) Prompt(msgs []chat.Message) ([]int, error) {
	if err := chattmpl.Check(msgs); err != nil {
		return nil, fmt.Errorf("student: %w: %w", generate.ErrInvalidRequest, err)
	}
	return turns.Prompt(msgs).Encode(s.tok).IDs, nil
}

// VocabSize is the model's vocabulary size: the token ids a logit bias may name.
func (s *Student) VocabSize() int { return s.gen.Model().VocabSize() }

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
	switch {
	case opts.TopK > 0:
		req.TopK = opts.TopK
	case opts.TopK < 0:
		req.TopK = 0 // no cut, whatever the default
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
	var each func(Delta) error
	if fn != nil {
		each = func(d Delta) error {
			if d.Text == "" {
				return nil
			}
			return fn(d.Text)
		}
	}
	choices, err := s.Complete(ctx, msgs, opts, Sample{}, each)
	if err != nil {
		return chat.Reply{}, err
	}
	return choices[0].Reply, nil
}

// Sample is what a completion asks of the student beyond chat.Options (student serve's n,
// logprobs, top_logprobs and logit_bias).
type Sample struct {
	// N is how many choices to generate (0 means 1). Each draws from its own seed: choice 0
	// from the request's (chat.Options.Seed, else the hash of the prompt), choice i from one
	// derived from it and i (ChoiceSeed). A greedy request (temperature 0 or top-k 1) is
	// generated once and its reply copied to every choice.
	N int
	// LogProbs records each completion token's log-probability (Choice.LogProbs): the
	// log-softmax of the logits plus LogitBias, divided by the temperature (1 at temperature 0),
	// over the whole vocabulary, before top-k and top-p (generate.Result.LogProbs, the values
	// student rollout records).
	LogProbs bool
	// TopLogProbs, with LogProbs, adds to each token the TopLogProbs most likely tokens of its
	// step under the same distribution.
	TopLogProbs int
	// LogitBias is added to the logits of the tokens it names before every draw.
	LogitBias map[int]float32
	// StopTokenIDs end each choice besides the student's stops (vLLM's stop_token_ids): the
	// reply is the text before the first one sampled, finished "stop".
	StopTokenIDs []int
	// KeepStopText (vLLM's include_stop_str_in_output) makes a reply that a stop string
	// (chat.Options.Stop) ended the text of every token generated, through the one that
	// completed the stop string: the stop string and the rest of that token included, so the
	// text is the decoding of the reply's tokens (its LogProbs) and a conversation rendered
	// from it holds those ids (docs/ROLLOUT.md, "Stop strings and the prefix property").
	// Without it the text is cut before the stop string, as OpenAI and vLLM cut it, while the
	// tokens (LogProbs, Usage.CompletionTokens) still run through the completing one. vLLM
	// cuts its text right after the stop string instead, dropping the rest of the token. A
	// reply that a StopTokenIDs id ended keeps that token's text too (vLLM's rule), unless the
	// id is one of the student's own stops (special tokens: no text).
	KeepStopText bool
}

// TokenLogProb is a completion token and its log-probability: its id and, with
// Sample.TopLogProbs, the most likely tokens of its step, most likely first. It holds ids and
// log-probabilities only (8 bytes an alternative, 32 a token), so that a reply at serve's bound
// (about a million entries) holds some 10 MB with top_logprobs 20 and 38 MB with 0 (every entry
// a token's) rather than the 96 and 103 MB that the token's bytes and text as strings in every
// entry took (TestLogProbsHeldCompact); its bytes and text come from
// the Vocab of the Choice or Delta that carries it (Vocab.TokenBytes, TokenText), when the
// reply is written.
type TokenLogProb struct {
	ID      int32
	LogProb float32
	Top     []TopLogProb
}

// TopLogProb is one of the most likely tokens of a step (TokenLogProb.Top): its id and its
// log-probability under the same distribution.
type TopLogProb struct {
	ID      int32
	LogProb float32
}

// Vocab gives a log-probability entry's token id its bytes as the tokenizer has them (a
// byte-level BPE piece's bytes, possibly part of a UTF-8 character; an added token's text; ""
// for an unknown id). The student's Tokenizer is one.
type Vocab interface {
	TokenBytes(id int) string
}

// TokenText is the text of a token whose bytes are b, as the tokenizer decodes the token alone
// (Tokenizer.Decode of its id): tokenizer.DecodeBytes(b), ill-formed UTF-8 replaced by U+FFFD;
// b itself, not copied, when it is well formed.
func TokenText(b string) string {
	if utf8.ValidString(b) {
		return b
	}
	return tokenizer.DecodeBytes([]byte(b))
}

// Choice is one choice of a completion: the reply, as Chat gives it, and with Sample.LogProbs
// one entry per completion token (Usage.CompletionTokens of them): the tokens generated up to
// the end of the reply (through the one completing a stop string, when one cut the text) and
// the stop token, when one ended it; Vocab (set with them) gives their ids their bytes.
type Choice struct {
	chat.Reply
	LogProbs []TokenLogProb
	Vocab    Vocab
}

// Delta is a piece of a choice as it is generated: the text it adds and the log-probabilities
// of the tokens consumed since the previous piece (their text may be held back: part of a
// UTF-8 character, or what may start a stop string), with the Vocab that gives their ids their
// bytes. A choice's last Delta has FinishReason set (a chat finish reason), no text, and the
// entries not yet sent (the stop token's).
type Delta struct {
	Choice       int
	Text         string
	LogProbs     []TokenLogProb
	Vocab        Vocab
	FinishReason string
}

// ChoiceSeed is the seed choice i draws from when a completion's seed is seed: seed itself for
// choice 0, so that a request's first choice is its reply with one choice, and a SplitMix64 mix
// of seed and i for the others.
func ChoiceSeed(seed int64, i int) int64 {
	if i == 0 {
		return seed
	}
	z := uint64(seed) + uint64(i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return int64(z ^ z>>31)
}

// Complete answers msgs with x.N choices (generated together: they join one batch and share
// the prompt's KV cache), calling fn (which may be nil) with each Delta as it is generated, from
// one goroutine at a time. An error from fn or from any choice ends them all and is returned.
func (s *Student) Complete(ctx context.Context, msgs []chat.Message, opts chat.Options, x Sample, fn func(Delta) error) ([]Choice, error) {
	start := time.Now()
	prompt, err := s.Prompt(msgs)
	if err != nil {
		return nil, err
	}
	req, err := s.Request(prompt, opts)
	if err != nil {
		return nil, err
	}
	req.LogProbs, req.TopLogProbs, req.LogitBias, req.StopIDs = x.LogProbs, x.TopLogProbs, x.LogitBias, x.StopTokenIDs
	n := max(x.N, 1)
	runs := n
	if req.Temperature <= 0 || req.TopK == 1 {
		runs = 1 // greedy: every choice is the same reply
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seqs := make([]*generate.Sequence, runs)
	for i := range seqs {
		r := req
		r.Seed = ChoiceSeed(req.Seed, i)
		if seqs[i], err = s.gen.Start(ctx, r); err != nil {
			return nil, fmt.Errorf("student: %w", err)
		}
	}
	var mu sync.Mutex
	emit := func(d Delta) error {
		if fn == nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if runs == n {
			return fn(d)
		}
		for c := range n {
			d.Choice = c
			if err := fn(d); err != nil {
				return err
			}
		}
		return nil
	}
	choices := make([]Choice, n)
	if runs == 1 { // one sequence: read it here
		if choices[0], err = s.collect(ctx, seqs[0], 0, len(prompt), opts.Stop, x.KeepStopText, req.LogProbs, emit); err != nil {
			return nil, err
		}
	} else {
		g, gctx := errgroup.WithContext(ctx)
		for i, seq := range seqs {
			g.Go(func() (err error) {
				choices[i], err = s.collect(gctx, seq, i, len(prompt), opts.Stop, x.KeepStopText, req.LogProbs, emit)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	for i := range choices {
		if i >= runs {
			choices[i] = choices[0]
		}
		choices[i].Latency = time.Since(start)
	}
	return choices, nil
}

// collect reads seq to its end as choice i of a completion, turning its tokens into text (cut
// at the first of stops, or with keepStop ended after the token that completed it) and, with
// logProbs, log-probability entries, passing each piece to emit.
func (s *Student) collect(ctx context.Context, seq *generate.Sequence, i, promptLen int, stops []string, keepStop, logProbs bool, emit func(Delta) error) (Choice, error) {
	defer seq.Cancel()
	ts := &textStream{tok: s.tok, stops: stops, keepStop: keepStop, logProbs: logProbs, emit: func(text string, lps []TokenLogProb) error {
		return emit(Delta{Choice: i, Text: text, LogProbs: lps, Vocab: s.tok})
	}}
	for {
		toks, err := seq.NextTokens(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return Choice{}, fmt.Errorf("student: %w", err)
		}
		hit, err := ts.add(toks)
		if err != nil {
			return Choice{}, err
		}
		if hit {
			seq.Cancel()
			break
		}
	}
	res, err := seq.Wait()
	if err != nil && !(ts.stopped && errors.Is(err, context.Canceled)) {
		return Choice{}, fmt.Errorf("student: %w", err)
	}
	byString := ts.stopped // a stop string ended the reply, before any stop token
	stopEntry := func() {  // the stop token was generated too: its entry comes last (vLLM's)
		if res.StopID < 0 || byString || !logProbs {
			return
		}
		last := len(res.LogProbs) - 1
		var top []generate.TokenProb
		if len(res.TopLogProbs) > last {
			top = res.TopLogProbs[last]
		}
		ts.record(generate.Token{ID: res.StopID, LogProb: res.LogProbs[last], Top: top})
	}
	if keepStop && res.StopID >= 0 && !byString && !slices.Contains(s.stopIDs, res.StopID) {
		// A request's stop_token_ids id that is not one of the student's own (special) stops
		// keeps its text, as vLLM's include_stop_str_in_output keeps it (the
		// skip_special_tokens text of a special stop is empty), so the text is the decoding of
		// every token generated; its entry goes out with its text.
		stopEntry()
		stopEntry = func() {}
		ts.open = append(ts.open, s.tok.TokenBytes(res.StopID)...)
	}
	if err := ts.flush(); err != nil {
		return Choice{}, err
	}
	stopEntry() // else in the finish delta
	reason := chat.FinishStop
	if res.FinishReason == generate.FinishLength && !ts.stopped {
		reason = chat.FinishLength
	}
	completion := len(res.Tokens)
	if res.StopID >= 0 {
		completion++ // the stop token was generated too
	}
	if byString {
		completion = ts.ids
	}
	if err := emit(Delta{Choice: i, LogProbs: ts.pendingLPs, Vocab: s.tok, FinishReason: reason}); err != nil {
		return Choice{}, err
	}
	return Choice{
		Reply: chat.Reply{
			Content:      ts.text.String(),
			FinishReason: reason,
			Usage:        chat.Usage{PromptTokens: promptLen, CompletionTokens: completion, CachedTokens: res.CachedTokens},
			Model:        s.id,
			Attempts:     1,
		},
		LogProbs: ts.lps,
		Vocab:    s.tok,
	}, nil
}

// textStream turns generated ids into text as they come: it holds back the bytes of a UTF-8
// character not yet complete (openTail: at most 3, however many tokens they came in) and any
// tail that may be the start of a stop string, and cuts the text at the first stop string. The
// bytes before such a character decode for good (tokenizer.DecodeBytes), so the text emitted is
// the tokenizer's decoding of the ids consumed (Tokenizer.Decode). With logProbs it also keeps
// each token's log-probability entry, passed to emit with the next piece of text.
type textStream struct {
	tok      Tokenizer
	stops    []string
	keepStop bool // a stop string ends the text after the token that completed it
	logProbs bool
	emit     func(text string, lps []TokenLogProb) error

	open       []byte          // bytes not yet decoded into text: a character not yet complete
	held       string          // decoded text not yet emitted (may start a stop string)
	text       strings.Builder // everything emitted
	ids        int             // ids consumed
	stopped    bool            // a stop string was found
	lps        []TokenLogProb  // every entry (logProbs)
	pendingLPs []TokenLogProb  // entries not yet emitted
}

// add consumes toks; it reports whether a stop string was found.
func (t *textStream) add(toks []generate.Token) (bool, error) {
	for _, tk := range toks {
		t.ids++
		t.record(tk)
		t.open = append(t.open, t.tok.TokenBytes(tk.ID)...)
		n := openTail(t.open)
		if n == len(t.open) {
			continue // wait for the rest of the character
		}
		t.held += tokenizer.DecodeBytes(t.open[:len(t.open)-n])
		t.open = append(t.open[:0], t.open[len(t.open)-n:]...)
		if hit, err := t.release(false); hit || err != nil {
			return hit, err
		}
	}
	return false, nil
}

// openTail returns how many bytes at the end of b begin a UTF-8 character not yet complete
// (0 to 3): bytes that more bytes could still make a character. Bytes that no continuation
// makes one (an invalid lead byte, a lead byte followed by a byte it cannot take, a stray
// continuation byte) are not open: the decoder has replaced them for good.
func openTail(b []byte) int {
	for n := 1; n <= min(utf8.UTFMax-1, len(b)); n++ {
		if c := b[len(b)-n]; utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

// record keeps tk's log-probability entry (with logProbs): ids and log-probabilities only.
func (t *textStream) record(tk generate.Token) {
	if !t.logProbs {
		return
	}
	e := TokenLogProb{ID: int32(tk.ID), LogProb: tk.LogProb}
	if tk.Top != nil {
		e.Top = make([]TopLogProb, len(tk.Top))
		for j, a := range tk.Top {
			e.Top[j] = TopLogProb{ID: int32(a.ID), LogProb: a.LogProb}
		}
	}
	t.lps = append(t.lps, e)
	t.pendingLPs = append(t.pendingLPs, e)
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
	case cut >= 0 && t.keepStop:
		// The text of every token consumed: with the bytes of a character the last one began.
		out, t.held, t.stopped = t.held+tokenizer.DecodeBytes(t.open), "", true
		t.open = nil
	case cut >= 0:
		out, t.held, t.stopped = t.held[:cut], "", true
	case final:
		t.held = ""
	default:
		out, t.held = t.held[:len(t.held)-keep], t.held[len(t.held)-keep:]
	}
	if out != "" {
		t.text.WriteString(out)
		lps := t.pendingLPs
		t.pendingLPs = nil
		if err := t.emit(out, lps); err != nil {
			return false, err
		}
	}
	return t.stopped, nil
}

// flush emits what is left at the end of generation.
func (t *textStream) flush() error {
	if t.stopped {
		return nil
	}
	if len(t.open) > 0 {
		t.held += tokenizer.DecodeBytes(t.open)
		t.open = nil
	}
	_, err := t.release(true)
	return err
}
