package teachers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Reasons name why a request was retried or a Chat call failed (Error.Reason, Stats maps).
const (
	ReasonRateLimited   = "rate_limited"   // HTTP 429
	ReasonServer        = "server_error"   // HTTP 5xx (and 408)
	ReasonTimeout       = "timeout"        // the attempt ran past Endpoint.Timeout
	ReasonConnection    = "connection"     // refused, reset, EOF, other transport errors
	ReasonMalformed     = "malformed_json" // a 2xx body that is not a chat completion (invalid or truncated JSON)
	ReasonEmptyChoices  = "empty_choices"  // a completion with no choices
	ReasonStreamIdle    = "stream_idle"    // a stream sent nothing for Endpoint.StreamIdleTimeout
	ReasonIncomplete    = "incomplete"     // a stream ended before the reply's finish_reason
	ReasonProviderFault = "provider_fault" // a provider finish reason that means the reply was cut by a fault (DeepSeek insufficient_system_resource, Zhipu network_error)
	ReasonEmpty         = "empty_content"  // blank content (Endpoint.OnEmpty)
	ReasonLength        = "length"         // finish_reason length (Endpoint.OnLength)
	ReasonContentFilter = "content_filter" // finish_reason content_filter (Endpoint.OnContentFilter)
	ReasonAuth          = "auth"           // HTTP 401/403: not retried
	ReasonClient        = "client_error"   // other HTTP 4xx, and a 3xx not followed: not retried
	ReasonCanceled      = "canceled"       // the caller's context ended
	// ReasonTooLong is a reply past what one reply may hold: a completion or stream chunk
	// that keeps over 4 MiB once the fields the client does not read are dropped and each text
	// is cut at textcap.Reply, a body over 64 MiB, a stream over 2 KiB for each token its
	// request allows (the larger of its max_tokens and max_completion_tokens, requestTokens;
	// 256 Ki tokens without either; at least 64 MiB). (A longer text is cut,
	// not a fault.)
	ReasonTooLong = "too_long"
	// ReasonReplyBudget is a reply that needed more room past its floor than the process's
	// ReplyBudget had left, or an attempt that waited its whole timeout for its floor.
	ReasonReplyBudget = "reply_budget"
)

// Error is a failed Chat call. Its text never contains the API key.
type Error struct {
	// Teacher is the endpoint name.
	Teacher string
	// Reason is one of the Reason* constants.
	Reason string
	// Status is the HTTP status of the last attempt, 0 when there was no response.
	Status int
	// Attempts is how many requests were sent.
	Attempts int
	// Message is the server's error message or the transport error, key redacted, at most
	// textcap.Error bytes.
	Message string
	// cause is kept only for context errors, so errors.Is(err, context.Canceled) works.
	cause error
}

// Error implements error.
func (e *Error) Error() string {
	s := fmt.Sprintf("teacher %s: %s", e.Teacher, e.Reason)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Permanent reports whether the same request would fail again whatever the timing: an
// authentication or client error (HTTP 4xx other than 408 and 429), or a redirect the client
// does not follow (HTTP 3xx). distill stops a run whose
// first episodes of a teacher all fail with one (distill.StopAfterSameErrors).
func (e *Error) Permanent() bool { return e.Reason == ReasonAuth || e.Reason == ReasonClient }

// Hint says how to fix a permanent error in the teachers config, "" for other errors.
func (e *Error) Hint() string {
	if !e.Permanent() {
		return ""
	}
	msg := strings.ToLower(e.Message)
	switch {
	case e.Status >= 300 && e.Status < 400:
		return fmt.Sprintf("set teacher %s's base_url to where its endpoint redirects (a redirect to another scheme, host or port, or one that drops the request body, is not followed)", e.Teacher)
	case e.Reason == ReasonAuth:
		return fmt.Sprintf("check teacher %s's API key (the variable api_key_env names, or CHAINEDSQL_%s_API_KEY) and that it may use its model", e.Teacher, EnvName(e.Teacher))
	case strings.Contains(msg, "enable_thinking") && strings.Contains(msg, "stream"):
		return fmt.Sprintf("set stream: true for teacher %s (the provider takes thinking requests only streamed), or thinking: false to turn thinking off", e.Teacher)
	case strings.Contains(msg, "max_completion_tokens"):
		return fmt.Sprintf("set provider: openai for teacher %s (it sends the budget as max_completion_tokens)", e.Teacher)
	case e.Status == 404 || strings.Contains(msg, "model"):
		return fmt.Sprintf("check teacher %s's model id against the provider's model list (model:, or the provider: profile's ids)", e.Teacher)
	}
	return fmt.Sprintf("check teacher %s's provider, model, thinking, stream and extra_body in the teachers config against what the provider's message asks", e.Teacher)
}

// Unwrap returns the context error when the caller's context ended, else nil.
func (e *Error) Unwrap() error { return e.cause }

// Reason returns the Reason* of err when it is (or wraps) an *Error, else "".
func Reason(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

// retryableReason reports whether a fault of this reason is worth another attempt.
func retryableReason(r string) bool {
	switch r {
	case ReasonRateLimited, ReasonServer, ReasonTimeout, ReasonConnection, ReasonMalformed, ReasonEmptyChoices,
		ReasonStreamIdle, ReasonIncomplete, ReasonProviderFault, ReasonTooLong, ReasonReplyBudget:
		return true
	}
	return false
}

// errDecode marks a 2xx body or stream chunk that is not the JSON it should be.
type errDecode struct{ err error }

func (e *errDecode) Error() string { return "decoding the response: " + e.err.Error() }

// classify turns an error of Client.exchange into a fault.
func (c *Client) classify(ctx, actx context.Context, err error, cp *capture) *fault {
	if ctx.Err() != nil {
		msg := ctx.Err().Error()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg += "; " + c.waited(cp, "by the caller's deadline")
		}
		return &fault{reason: ReasonCanceled, cause: ctx.Err(), msg: msg}
	}
	if errors.Is(context.Cause(actx), errStreamIdle) {
		return &fault{reason: ReasonStreamIdle, status: cp.status, retry: true,
			msg: fmt.Sprintf("the stream sent nothing for %v (stream_idle_timeout)", c.ep.StreamIdleTimeout)}
	}
	status := 0
	msg := ""
	var de *errDecode
	var ev *streamError
	var se *statusError
	var tl *tooLongError
	switch {
	case errors.As(err, &tl):
		return &fault{reason: ReasonTooLong, status: cp.status, msg: tl.Error(), retry: true}
	case errors.Is(err, errStreamTooLong):
		return &fault{reason: ReasonTooLong, status: cp.status, msg: err.Error(), retry: true}
	case errors.Is(err, errReplyBudget):
		return &fault{reason: ReasonReplyBudget, status: cp.status, msg: err.Error(), retry: true}
	case errors.As(err, &de):
		return &fault{reason: ReasonMalformed, status: cp.status, msg: de.Error(), retry: true}
	case errors.As(err, &ev):
		// An error event inside a 200 stream (vLLM, OpenRouter send one when generation fails).
		return &fault{reason: ReasonServer, status: cp.status, msg: ev.Error(), retry: true}
	case errors.As(err, &se):
		status, msg = se.status, se.msg
	}
	if status != 0 {
		f := &fault{status: status, msg: msg, retryAfter: retryAfter(cp.header)}
		switch {
		case status == http.StatusTooManyRequests:
			f.reason, f.retry = ReasonRateLimited, true
		case status >= 500 || status == http.StatusRequestTimeout:
			f.reason, f.retry = ReasonServer, true
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			f.reason = ReasonAuth
		default:
			f.reason = ReasonClient
		}
		return f
	}
	var ne net.Error
	if errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &fault{reason: ReasonTimeout, status: cp.status, msg: c.waited(cp, fmt.Sprintf("within the attempt's timeout (%v)", c.ep.Timeout)), retry: true}
	}
	return &fault{reason: ReasonConnection, msg: transportMessage(err), retry: true}
}

// transportMessage is err's text with the URL of the *url.Error in it redacted (redactURL):
// net/http names the whole request URL, and masks only the password of its user info, so the
// user name and a key in the base URL's query showed in the message.
func transportMessage(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	return strings.Replace(err.Error(), ue.Error(), fmt.Sprintf("%s %q: %v", ue.Op, redactURL(ue.URL), ue.Err), 1)
}

// errorField reads error.message from a raw body, cut at 500 bytes; "" when absent.
func errorField(body []byte) string {
	msg, _ := providerError(body)
	if len(msg) > 500 {
		return msg[:500] + "…"
	}
	return msg
}

// providerError reads the error object of a body {"error": {...}}: its message, and whether the
// body has one (a message that is a string, or a list of strings, joined). The member is found
// as encoding/json finds it (any case, escaped), never by its text: a reduced body (scan.go)
// has lost the members the client does not read, so its text alone would not say what the
// whole body's said.
func providerError(body []byte) (string, bool) {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil {
		return "", false
	}
	return errorObjectMessage(r.Error)
}

// errorObjectMessage reads the message of an error object; providers send code as a string or
// a number (OpenRouter), so only the message is read.
func errorObjectMessage(raw []byte) (string, bool) {
	var o struct {
		Message errorMessage `json:"message"`
	}
	if json.Unmarshal(raw, &o) != nil || !o.Message.set {
		return "", false
	}
	return o.Message.s, o.Message.ok
}

// errorMessage is an error object's message: set when the object has one (null too), ok when
// it is a string or a list of strings (joined), s. It is decoded from the object's bytes where
// they lie, not from a copy (as a json.RawMessage would be).
type errorMessage struct {
	s       string
	set, ok bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *errorMessage) UnmarshalJSON(b []byte) error {
	*m = errorMessage{set: true}
	var s string
	if json.Unmarshal(b, &s) == nil {
		m.s, m.ok = s, true
		return nil
	}
	var list []string
	if json.Unmarshal(b, &list) == nil {
		m.s, m.ok = strings.Join(list, ", "), true
	}
	return nil
}
