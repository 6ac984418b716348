// Package serve exposes a chat backend (the student runtime) over the OpenAI chat-completions
// HTTP API: POST /v1/chat/completions, non-streaming and streaming (server-sent events ending
// with "data: [DONE]"), with n choices, logprobs and top_logprobs (vLLM's
// return_tokens_as_token_ids naming tokens by id), and logit_bias, sampling fields a request
// leaves out taken from the server's Defaults (vLLM's: a checkpoint's generation_config.json,
// ReadGenerationConfig, else temperature 1), and GET /v1/models; a Swap backend adds POST
// /v1/weights (reload the
// weights from a directory while serving) and GET /v1/weights. Errors use OpenAI's JSON error
// shape. Every request runs in its own goroutine; the backend batches them (the student's
// generator decodes all requests in flight together).
package serve

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// Backend answers conversations, streaming the reply's text (*student.Student is one).
type Backend interface {
	// ModelID is the model's name in /v1/models and in replies.
	ModelID() string
	// Stream answers msgs, calling fn (which may be nil) with each piece of the reply's text.
	// Errors about the request itself wrap generate.ErrInvalidRequest (answered 400).
	Stream(ctx context.Context, msgs []chat.Message, opts chat.Options, fn func(delta string) error) (chat.Reply, error)
	// Complete answers msgs with x.N choices, with log-probabilities and a logit bias as x
	// asks, calling fn (which may be nil) with each piece of each choice, one at a time; the
	// server answers every chat completion with it. Errors as for Stream.
	Complete(ctx context.Context, msgs []chat.Message, opts chat.Options, x student.Sample, fn func(student.Delta) error) ([]student.Choice, error)
}

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 32 << 20

// Limits of a chat completion's n and top_logprobs.
const (
	// DefaultMaxN is Config.MaxN's default.
	DefaultMaxN = 16
	// MaxTopLogprobs is the most top_logprobs a request may ask for, OpenAI's bound.
	MaxTopLogprobs = 20
)

// Config tunes Handler. Zero fields take the defaults named.
type Config struct {
	// MaxN is the most choices (n) one request may ask for (default DefaultMaxN).
	MaxN int
	// Defaults are the temperature, top_p and top_k of a request that leaves them out (default
	// NeutralDefaults). The backend's own defaults for them never apply.
	Defaults *Defaults
	// TokenIDs is return_tokens_as_token_ids for a request that leaves it out (vLLM's
	// --return-tokens-as-token-ids).
	TokenIDs bool
}

// Handler returns the HTTP handler serving b. logger may be nil (no request log). When b is a
// *Swap it also serves /v1/weights, and each reply's system_fingerprint names the weights
// version that computed it (Fingerprint).
func Handler(b Backend, logger *log.Logger, cfg Config) http.Handler {
	if cfg.MaxN <= 0 {
		cfg.MaxN = DefaultMaxN
	}
	d := NeutralDefaults
	if cfg.Defaults != nil {
		d = *cfg.Defaults
	}
	s := &server{b: b, log: logger, created: time.Now().Unix(), maxN: cfg.MaxN, defaults: d, tokenIDsDefault: cfg.TokenIDs}
	s.rl, _ = b.(reloader)
	routes := "/v1/chat/completions and /v1/models"
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.completions)
	mux.HandleFunc("/v1/models", s.models)
	mux.HandleFunc("/v1/models/{id}", s.model)
	if s.rl != nil {
		mux.HandleFunc("/v1/weights", s.weights)
		routes = "/v1/chat/completions, /v1/models and /v1/weights"
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", fmt.Sprintf("no route for %s %s (serving %s)", r.Method, r.URL.Path, routes))
	})
	return mux
}

// reloader is a backend whose weights can be replaced while serving (*Swap).
type reloader interface {
	use() (Backend, int64, func(), error)
	Weights() WeightsInfo
	Reload(ctx context.Context, dir string) (WeightsInfo, error)
}

type server struct {
	b       Backend
	rl      reloader // nil unless b is one
	log     *log.Logger
	created int64
	maxN    int
	// defaults fill a request's sampling fields; tokenIDsDefault is its
	// return_tokens_as_token_ids when it has none.
	defaults        Defaults
	tokenIDsDefault bool
}

// WriteError writes an error reply in OpenAI's shape (type invalid_request_error), for routes
// that other commands serve beside Handler's.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, "invalid_request_error", code, msg)
}

// WriteParamError is WriteError naming the request's field at fault in the error's param ("" for
// null, as code).
func WriteParamError(w http.ResponseWriter, status int, param, code, msg string) {
	(&apiError{status: status, param: param, code: code, msg: msg}).write(w)
}

// WriteJSON writes v as a JSON reply with status.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var e oai.ErrorBody
	e.Error.Message, e.Error.Type = msg, typ
	if code != "" {
		e.Error.Code = &code
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *server) modelObject() modelObject {
	return modelObject{ID: s.b.ModelID(), Object: "model", Created: s.created, OwnedBy: "chainedsql"}
}

func (s *server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelObject{s.modelObject()}})
}

func (s *server) model(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	if id := r.PathValue("id"); id != s.b.ModelID() {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", fmt.Sprintf("the model %q does not exist (serving %q)", id, s.b.ModelID()))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, allow))
}

// usage is a completion's usage as OpenAI counts it: the prompt once, the completion tokens of
// every choice; cached_tokens are the prompt tokens that no choice had to compute (the fewest
// any choice took from a cache).
func usage(choices []student.Choice) chat.Usage {
	u := choices[0].Usage
	for _, c := range choices[1:] {
		u.CompletionTokens += c.Usage.CompletionTokens
		u.CachedTokens = min(u.CachedTokens, c.Usage.CachedTokens)
	}
	return u
}

func toUsage(u chat.Usage) *oai.Usage {
	return &oai.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.Total(),
		PromptTokensDetails: &oai.PromptDetails{CachedTokens: u.CachedTokens}}
}

// nullLogprobs is choice.logprobs as OpenAI writes it when none were asked for.
var nullLogprobs = json.RawMessage("null")

// minLogprob is the lowest log-probability written: lower ones (an impossible token's -Inf,
// which JSON cannot carry) are written as it, as vLLM writes them.
const minLogprob = -9999

// logprobs is choice.logprobs for entries, their tokens' bytes and text those v gives (null
// when the request asked for none, or, in a stream, when a chunk carries no entries); with ids,
// each token is named "token_id:ID" (tokenName), its bytes still its own.
func logprobs(asked, ids bool, v student.Vocab, entries []student.TokenLogProb) json.RawMessage {
	if !asked || entries == nil {
		return nullLogprobs
	}
	lp := oai.Logprobs{Content: make([]oai.TokenLogprob, len(entries))}
	for i, e := range entries {
		b := v.TokenBytes(int(e.ID))
		lp.Content[i] = oai.TokenLogprob{Token: tokenName(e.ID, b, ids), Logprob: max(e.LogProb, minLogprob), Bytes: byteList(b), TopLogprobs: []oai.TopLogprob{}}
		for _, a := range e.Top {
			b := v.TokenBytes(int(a.ID))
			lp.Content[i].TopLogprobs = append(lp.Content[i].TopLogprobs, oai.TopLogprob{Token: tokenName(a.ID, b, ids), Logprob: max(a.LogProb, minLogprob), Bytes: byteList(b)})
		}
	}
	b, err := json.Marshal(lp)
	if err != nil { // no value above can fail to encode
		panic(fmt.Sprintf("serve: encoding logprobs: %v", err))
	}
	return b
}

// tokenName is how a log-probability entry names token id, whose bytes are b: its text
// (student.TokenText), or with ids "token_id:ID", vLLM's return_tokens_as_token_ids form,
// which names even a token that is part of a UTF-8 character exactly.
func tokenName(id int32, b string, ids bool) string {
	if ids {
		return "token_id:" + strconv.Itoa(int(id))
	}
	return student.TokenText(b)
}

// byteList is s's bytes as the JSON list of integers OpenAI writes.
func byteList(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// status maps a backend error to an HTTP status and OpenAI error type.
func status(ctx context.Context, err error) (int, string) {
	switch {
	case ctx.Err() != nil:
		return 499, "request_cancelled" // the client is gone; nobody reads this
	case errors.Is(err, generate.ErrInvalidRequest):
		return http.StatusBadRequest, "invalid_request_error"
	}
	return http.StatusInternalServerError, "server_error"
}

func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, http.MethodPost)
		return
	}
	start := time.Now()
	req, msgs, opts, x, aerr := s.parse(r)
	if aerr != nil {
		aerr.write(w)
		s.logf("chat: %d %s", aerr.status, aerr.msg)
		return
	}
	id, created, ids := newID(), time.Now().Unix(), s.tokenIDs(req)
	b, fp := s.b, ""
	if s.rl != nil {
		cur, version, release, err := s.rl.use()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "server_error", "", err.Error())
			return
		}
		defer release() // the weights stay open until the reply is written
		b, fp = cur, Fingerprint(version)
	}
	if aerr := cmp.Or(checkRoom(b, msgs, opts), checkBias(b, x), checkLogprobs(b, msgs, opts, x)); aerr != nil {
		aerr.write(w)
		s.logf("chat: %d %s", aerr.status, aerr.msg)
		return
	}
	if !req.Stream {
		choices, err := b.Complete(r.Context(), msgs, opts, x, nil)
		if err != nil {
			st, typ := status(r.Context(), err)
			writeError(w, st, typ, "", clientMessage(err))
			s.logf("chat %s: %d %v", id, st, err)
			return
		}
		out := oai.Completion{ID: id, Object: oai.ObjectCompletion, Created: created, Model: s.b.ModelID(), SystemFingerprint: fp, Usage: toUsage(usage(choices))}
		for i, c := range choices {
			fr, content := c.FinishReason, c.Content
			out.Choices = append(out.Choices, oai.Choice{Index: i, Message: &oai.Message{Role: chat.RoleAssistant, Content: &content}, FinishReason: &fr})
		}
		u := out.Usage
		if err := writeCompletion(w, out, x.LogProbs, ids, choices); err != nil {
			s.logf("chat %s: 499 %v (%d+%d tokens computed, %s; the reply not written whole)", id, err, u.PromptTokens, u.CompletionTokens, finishes(choices))
			return
		}
		s.logf("chat %s: %d+%d tokens, %s, %v", id, u.PromptTokens, u.CompletionTokens, finishes(choices), time.Since(start).Round(time.Millisecond))
		return
	}
	s.stream(w, r, b, req, msgs, opts, x, oai.Completion{ID: id, Object: oai.ObjectChunk, Created: created, Model: s.b.ModelID(), SystemFingerprint: fp}, start)
}

// finishes is the choices' finish reasons for the log, comma-separated.
func finishes(choices []student.Choice) string {
	fr := make([]string, len(choices))
	for i, c := range choices {
		fr[i] = c.FinishReason
	}
	return strings.Join(fr, ",")
}

// stream answers with server-sent events: for each choice a role chunk, content chunks (each
// with the log-probabilities of its tokens when asked for) and a finish chunk (with those of
// the tokens not yet sent: the stop token's), the choices' chunks interleaved as they are
// generated; then the usage chunk when asked for, and "data: [DONE]". An error after the
// first byte is sent as an error event (the status line is already out). b computes the reply;
// head is the envelope of every chunk.
func (s *server) stream(w http.ResponseWriter, r *http.Request, b Backend, req *request, msgs []chat.Message, opts chat.Options, x student.Sample, head oai.Completion, start time.Time) {
	id, ids := head.ID, s.tokenIDs(req)
	flusher, _ := w.(http.Flusher)
	started := false
	begin := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		w.WriteHeader(http.StatusOK)
	}
	send := func(v any) error {
		begin()
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	chunk := func(i int, d *oai.Delta, fr *string, lp json.RawMessage) oai.Completion {
		c := head
		c.Choices = []oai.Choice{{Index: i, Delta: d, FinishReason: fr, Logprobs: lp}}
		return c
	}
	empty := ""
	opened := make([]bool, max(x.N, 1))
	choices, err := b.Complete(r.Context(), msgs, opts, x, func(d student.Delta) error {
		if !opened[d.Choice] {
			opened[d.Choice] = true
			if err := send(chunk(d.Choice, &oai.Delta{Role: chat.RoleAssistant, Content: &empty}, nil, nullLogprobs)); err != nil {
				return err
			}
		}
		lp := logprobs(x.LogProbs, ids, d.Vocab, d.LogProbs)
		if d.FinishReason != "" {
			fr := d.FinishReason
			return send(chunk(d.Choice, &oai.Delta{}, &fr, lp))
		}
		text := d.Text
		return send(chunk(d.Choice, &oai.Delta{Content: &text}, nil, lp))
	})
	if err != nil {
		st, typ := status(r.Context(), err)
		s.logf("chat %s (stream): %d %v", id, st, err)
		if !started {
			writeError(w, st, typ, "", clientMessage(err))
			return
		}
		var e oai.ErrorBody
		e.Error.Message, e.Error.Type = clientMessage(err), typ
		send(e)
		return
	}
	u := usage(choices)
	cut := func(err error) { // the last writes failed: the client did not get the whole reply
		s.logf("chat %s (stream): 499 %v (%d+%d tokens computed, %s; the reply not written whole)", id, err, u.PromptTokens, u.CompletionTokens, finishes(choices))
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c := head
		c.Choices, c.Usage = []oai.Choice{}, toUsage(u)
		if err := send(c); err != nil {
			cut(err)
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		cut(err)
		return
	}
	if flusher != nil {
		flusher.Flush()
	}
	s.logf("chat %s (stream): %d+%d tokens, %s, %v", id, u.PromptTokens, u.CompletionTokens, finishes(choices), time.Since(start).Round(time.Millisecond))
}

func (s *server) logf(format string, args ...any) {
	if s.log != nil {
		s.log.Printf(format, args...)
	}
}

// weights answers GET /v1/weights (the weights serving) and POST /v1/weights {"path": DIR}
// (reload them from DIR; the reply is the new weights' description).
func (s *server) weights(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.rl.Weights())
		return
	case http.MethodPost:
	default:
		methodNotAllowed(w, r, "GET, POST")
		return
	}
	var req struct {
		Path string `json:"path"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf(`request body is not {"path": "DIR"}: %v`, err))
		return
	}
	if req.Path == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", `path: the weights directory is required ({"path": "DIR"})`)
		return
	}
	s.logf("weights: loading %s", req.Path)
	info, err := s.rl.Reload(r.Context(), req.Path)
	if err != nil {
		st, code := http.StatusUnprocessableEntity, "weights_not_loaded"
		switch {
		case errors.Is(err, ErrReloading):
			st, code = http.StatusConflict, "reload_in_progress"
		case errors.Is(err, ErrClosed):
			st, code = http.StatusServiceUnavailable, "closing"
		case errors.Is(err, ErrOutsideRoot):
			st, code = http.StatusForbidden, "weights_outside_root"
		}
		s.logf("weights: %s not loaded (%d): %v", req.Path, st, err)
		writeError(w, st, "invalid_request_error", code, fmt.Sprintf("%s (still serving weights version %d from %s)", clientMessage(err), s.rl.Weights().Version, s.rl.Weights().Path))
		return
	}
	named := ""
	if info.RequestedPath != info.Path {
		named = " (named " + info.RequestedPath + ")"
	}
	s.logf("weights: version %d from %s%s in %.2fs", info.Version, info.Path, named, info.LoadSeconds)
	writeJSON(w, http.StatusOK, info)
}
