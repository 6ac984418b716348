package teachers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// The oracle of the reduced readers: the readers before them, which read a plain body, or each
// line of an event stream, whole and decoded it with encoding/json.

// wholeReadPlain is readPlain reading the body whole.
func wholeReadPlain(body []byte, a *assembly) ([]byte, error) {
	var w oai.Completion
	if err := json.Unmarshal(body, &w); err != nil {
		return body, &errDecode{err}
	}
	a.add(&w, literalPiece)
	return body, nil
}

// wholeReadStream is readStream reading each line whole.
func wholeReadStream(ctype string, body []byte, a *assembly) ([]byte, error) {
	if isJSON(http.Header{"Content-Type": {ctype}}) {
		b, err := wholeReadPlain(body, a)
		if err == nil {
			a.finished = true
		}
		return b, err
	}
	// A byte order mark that begins the stream is ignored (TestSSELeadingBOM: the reader before
	// dropped the first line instead).
	r := bufio.NewReader(bytes.NewReader(bytes.TrimPrefix(body, []byte("\ufeff"))))
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, nil // the end; a last line without its newline is dropped
		}
		p, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
		if !ok {
			continue
		}
		p = bytes.TrimSpace(p)
		if string(p) == "[DONE]" {
			return nil, nil
		}
		if len(p) == 0 {
			continue
		}
		var ev struct {
			oai.Completion
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(p, &ev); err != nil {
			return nil, &errDecode{err}
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" && ev.Choices == nil {
			msg, _ := errorObjectMessage(ev.Error)
			return nil, &streamError{msg: msg}
		}
		a.add(&ev.Completion, literalPiece)
	}
}

// readOutcome is what a reader made of a body: everything the client reads of it.
type readOutcome struct {
	Err                      string // "", "decode", "event: MSG", or the error itself
	Content                  string
	Reasoning                [3]string
	NonBlank                 [4]bool // the content and each reasoning text
	Model, Finish            string
	Finished                 bool
	Choices                  int
	Usage                    *oai.Usage
	ErrorField               string // errorField of the kept body, read (Client.reply) only when Err is ""
	ErrorFieldOK, BodyIsKept bool
}

// outcome is what a read into a made of a body, each text cut at limit (0 none) as the Stepper
// cuts it: a whole read's texts by textcap.Cut, a reduced read's as they were assembled.
func outcome(a *assembly, kept []byte, err error, limit int) readOutcome {
	text := func(t *replyText) string {
		if limit > 0 && a.limit == 0 {
			return textcap.Cut(t.String(), limit)
		}
		return t.String()
	}
	o := readOutcome{Content: text(&a.content), Model: a.model, Finish: a.finish, Finished: a.finished,
		Choices: a.choices, Usage: a.usage, BodyIsKept: kept != nil}
	o.NonBlank[0] = a.content.nonBlank
	for i := range a.reasoning {
		o.Reasoning[i] = text(&a.reasoning[i])
		o.NonBlank[i+1] = a.reasoning[i].nonBlank
	}
	if err == nil {
		// A failed read's kept body is never read: after a value and then more, the reduced
		// read kept the value, the whole read the body.
		_, o.ErrorFieldOK = providerError(kept)
		o.ErrorField = errorField(kept)
	}
	var de *errDecode
	var se *streamError
	switch {
	case err == nil:
	case errors.As(err, &de):
		o.Err = "decode"
	case errors.As(err, &se):
		o.Err = "event: " + se.msg
	default:
		o.Err = err.Error()
	}
	return o
}

// compareReads reads body as a plain completion (ctype "") or as a response to a stream
// request, reduced and whole, from one read and from reads of a byte at a time, each text
// whole and cut at a limit of 1 to 23 bytes and of 25 to 64 (by the body's length: a cut in every
// place of a character, of an escape, of the marker; the second keeps some of the text before
// the marker, which the first rarely does, the marker being 22 bytes and more), and reports where
// they differ.
func compareReads(t *testing.T, ctype string, body []byte) {
	t.Helper()
	compareReadsCut(t, ctype, body, 0, 1+len(body)%23, 25+len(body)%40)
}

// compareReadsCut is compareReads with the texts whole (limit 0) and cut at each of limits.
func compareReadsCut(t *testing.T, ctype string, body []byte, limits ...int) {
	t.Helper()
	var wa assembly
	var kept []byte
	var err error
	if ctype == "" {
		kept, err = wholeReadPlain(body, &wa)
	} else {
		kept, err = wholeReadStream(ctype, body, &wa)
	}
	for _, limit := range limits {
		want := outcome(&wa, kept, err, limit)
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(body)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			a := assembly{limit: limit}
			cp := &capture{status: 200}
			var err error
			if ctype == "" {
				err = readPlain(r, cp, &a)
			} else {
				err = readStream(http.Header{"Content-Type": {ctype}}, r, cp, &a)
			}
			if got := outcome(&a, cp.body, err, limit); !reflect.DeepEqual(got, want) {
				t.Errorf("%s %.300q (one byte at a time %v, texts cut at %d):\nreduced %+v\nwhole   %+v", ctype, body, oneByte, limit, got, want)
			}
		}
	}
}

// oneReply is a completion holding a message (or, in a stream, a chunk holding a delta).
func oneReply(message string) string {
	return `{"id":"x","model":"m","choices":[{"index":0,"message":` + message + `,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`
}

// edgeBodies are plain bodies at the edges of JSON and of encoding/json's decoding.
var edgeBodies = []string{
	oneReply(`{"role":"assistant","content":"<sql>SELECT 1</sql>"}`),
	oneReply(`{"content":null,"reasoning_content":"r"}`),
	"\n\n  " + oneReply(`{"content":"a"}`) + " \r\n\t",
	oneReply(`{"content":"a"}`) + " x",
	oneReply(`{"content":"a"}`) + "\u00a0",
	oneReply(`{"content":"a"}`) + "{}",
	// names as encoding/json matches them: any case, escaped, folded (the Kelvin sign is k)
	`{"MODEL":"m","Choices":[{"INDEX":0,"Message":{"CONTENT":"a","Reasoning_Content":"r"},"Finish_Reason":"stop"}],"Usage":{"Prompt_To\u212aens":5}}`,
	`{"model":"m","choices":[{"index":0,"\u006d\u0065ssage":{"c\u006fntent":"a","\u0072easoning":"r"},"finish_reason":"stop"}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","content":"b","Content":"c"}}],"model":"n","Model":"o"}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a"}}],"choices":[{"index":0,"message":{"content":"b"}}]}`,
	// a repeated list: each element merged into the one at its index in the list before it
	// (a later index 0 reads an earlier choice's texts), the list as long as the later one,
	// elements the later one cut off read again by a list after it, null and [] starting anew
	`{"model":"m","choices":[{"index":1,"message":{"content":"abcdefghijklmnopqrstuvwxyz"}}],"choices":[{"index":0}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"abcdefghijkl"}},{"index":0,"message":{"content":"mnopqrstuvwxyz"}}],"choices":[{"message":{"content":"A"}},{}]}`,
	`{"model":"m","choices":[{"message":{"content":"abcdefghijkl"}},{"message":{"content":"mnopqrstuvwxyz"}},{"delta":{"content":"0123456789"}}],"choices":[{}],"choices":[{},{"index":1},{}]}`,
	`{"model":"m","choices":[{"message":{"content":"abcdefghijkl"}}],"choices":null,"choices":[{"message":{"reasoning":"mnopqrstuvwxyz"}}]}`,
	`{"model":"m","choices":[{"message":{"content":"abcdefghijkl"}}],"choices":[],"choices":[{"message":{"reasoning":"mnopqrstuvwxyz"}}]}`,
	oneReply(`{"content":"c","reasoning_details":[{"text":"abcdefghijklmnop"},{"type":"reasoning.text","text":"qrstuvwxyz"}],"reasoning_details":[{"type":"reasoning.text"}]}`),
	oneReply(`{"content":"c","reasoning_details":[{"type":"reasoning.text","text":"abcdefghijklmnop"}],"Reasoning_Details":[{"text":"qrstuvwxyz"},{"type":"reasoning.summary","summary":"0123456789"}]}`),
	// unread members, of any size and shape
	oneReply(`{"content":"a","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}],"annotations":[],"x":{"y":[1,2,{"z":null}]}}`),
	`{"model":"m","choices":[{"index":0,"message":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.1,"bytes":[97],"top_logprobs":[]}]},"finish_reason":"stop"}],"prompt_logprobs":null,"kv_transfer_params":{"a":[[[]]]}}`,
	`{"model":"m","service_tier":"default","system_fingerprint":"fp","created":1700000000,"object":"chat.completion","choices":[{"index":0,"message":{"content":"a"},"stop_reason":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"server_tool_use":{"a":1},"prompt_tokens_details":{"cached_tokens":1,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":2,"accepted_prediction_tokens":0},"cost":0.5,"is_byok":true,"cost_details":{"upstream_inference_cost":0.25,"x":1}}}`,
	// types: a value of another kind than its field's fails as it did
	`{"model":"m","choices":{"index":0}}`,
	`{"model":"m","choices":[{"index":0,"message":[1,2]}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":5}}]}`,
	`{"model":"m","choices":[{"index":"0","message":{"content":"a"}}]}`,
	`{"model":"m","choices":[{"index":0.0,"message":{"content":"a"}}]}`,
	`{"model":"m","choices":[{"index":1e0,"message":{"content":"a"}}]}`,
	`{"model":"m","choices":[{"index":99999999999999999999,"message":{"content":"a"}}]}`,
	`{"id":{"a":1},"model":"m","choices":[]}`,
	`{"id":["a"],"model":"m","choices":[]}`,
	`{"id":5,"model":"m","choices":[]}`,
	`{"created":"yesterday","model":"m","choices":[]}`,
	`{"created":-1.5,"model":"m","choices":[]}`,
	`{"model":"m","choices":[{"index":0,"message":{"role":7,"content":"a"}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"role":{"a":"b"},"content":"a"}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":{"text":"t","other":[1]}}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":{"Summary":"s"}}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":{"text":5}}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":[1,{"text":"t"}]}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":7}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning":null,"reasoning_content":null}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":[{"type":"reasoning.text","text":"t","format":"x","index":0},{"type":"reasoning.summary","summary":"s"},{"type":"reasoning.encrypted","data":"zz"}]}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":{"type":"reasoning.text"}}}]}`,
	`{"model":"m","choices":[{"index":0,"message":{"content":"a","reasoning_details":[{"type":"reasoning.text","format":[1]}]}}]}`,
	`{"model":"m","choices":[null,{"index":0,"message":null,"delta":null,"finish_reason":null}],"usage":null}`,
	`{"model":"m","choices":null}`,
	`null`, `[]`, `"x"`, `5`, `true`, ``, ` `, `{}`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"a":tru}`, `{"a":nul}`,
	`{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":1e+}`, `{"a":-0.0e-0}`, `{"a":.5}`, `{"a":+1}`,
	// strings: escapes, invalid UTF-8, control characters
	oneReply(`{"content":"\u00e9\ud83e\udd14\n\t\"\\\/\b\f\r"}`),
	oneReply(`{"content":"lone \ud800 and \udc00 surrogates"}`),
	oneReply(`{"content":"bad \x"}`),
	oneReply(`{"content":"bad \u12"}`),
	oneReply(`{"content":"bad \u12g4"}`),
	oneReply("{\"content\":\"raw \xff\xfe bytes \xe2\x82\"}"),
	oneReply("{\"content\":\"a\tb\"}"),
	oneReply("{\"content\":\"a\nb\"}"),
	"{\"model\":\"m\",\"choi\xffces\":[]}",
	// texts: blank or not as strings.TrimSpace sees them (Unicode white space, escaped or not;
	// a zero-width space is not white space), surrogates split across fields, every field
	oneReply(`{"content":" \u00a0\u2003\n\t\u000b\u3000\u0085","reasoning_content":"\u200b ","reasoning":"\f\r"}`),
	oneReply("{\"content\":\"\xe3\x80\x80 \xc2\xa0\xe2\x80\xa8\",\"reasoning_content\":\" \xc2\x85x\"}"),
	oneReply(`{"content":"\ud83e\udd14\ud83e","reasoning":{"text":"\udd14x \ud83e\u0041"},"reasoning_details":[{"type":"reasoning.text","text":"\uD83E\uDD14\uDBFF\uDFFF"}]}`),
	oneReply(`{"content":"ab\u00e9\u20ac\ud83e\udd14cd","reasoning_details":[{"type":"reasoning.summary","summary":"s\u00e9"},{"type":"reasoning.text","text":""},{"type":"reasoning.text","text":"t\u00e9t"}]}`),
	oneReply(`{"content":"","reasoning_content":"","reasoning":{"content":"  "},"reasoning_details":[{"type":"reasoning.text","text":" "}]}`),
	// the error object of a reply without choices
	`{"error":{"message":"overloaded","code":529}}`,
	`{"error":{"message":["a","b"]}}`,
	`{"error":{"Message":"m"}}`,
	`{"error":"boom"}`,
	`{"error":[{"message":"m"}]}`,
	`{"error":null,"choices":[]}`,
	`{"detail":"Not Found"}`,
	// the error object's name as encoding/json matches it, the text "error" only in a member
	// the reducer drops
	`{"model":"m","choices":[],"\u0065rror":{"message":"boom"},"x":"error"}`,
	`{"model":"m","choices":[],"Error":{"message":"boom"}}`,
	// nesting: encoding/json's limit is 10000
	`{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"model":"m","choices":[]}`,
	`{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"model":"m","choices":[]}`,
	`{"x":` + strings.Repeat(`{"a":`, 9999) + "1" + strings.Repeat("}", 9999) + `,"model":"m","choices":[]}`,
	`{"x":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + `,"model":"m","choices":[]}`,
	`{"choices":[{"message":{"reasoning":` + strings.Repeat("[", 9995) + strings.Repeat("]", 9995) + `}}]}`,
	`{"choices":[{"message":{"reasoning":` + strings.Repeat("[", 9996) + strings.Repeat("]", 9996) + `}}]}`,
}

// edgeStreams are event streams at the edges of the format.
var edgeStreams = []string{
	"data: " + oneReply(`{"content":"a"}`) + "\n\ndata: [DONE]\n\n",
	"data:" + oneReply(`{"content":"a"}`) + "\r\n\r\ndata:[DONE]\r\n",
	"  data: \u00a0" + oneReply(`{"content":"a"}`) + " \u00a0\v\f\r\n",
	"\u00a0data: " + oneReply(`{"content":"a"}`) + "\n",
	"\ufeffdata: " + oneReply(`{"content":"a"}`) + "\n",
	"\ufeff\ufeffdata: " + oneReply(`{"content":"a"}`) + "\n",
	"\ufeff",
	"data: " + oneReply(`{"content":"a"}`) + "\u0085\n",
	"data: " + oneReply(`{"content":"a"}`) + "\u2028\n",
	"data: " + oneReply(`{"content":"a"}`) + "\xff\n",
	"data: " + oneReply(`{"content":"a"}`) + " x\n",
	"data: " + oneReply(`{"content":"a"}`) + "{}\n",
	"data: " + oneReply(`{"content":"a"}`), // no newline: dropped
	"data: " + oneReply(`{"content":"a"}`) + "\ndata: {\"bad\n",
	"data: " + oneReply(`{"content":"a"}`) + "\ndata: {\"bad\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\"a\n\"}}]}\n",
	"data: {\"choices\":[{\"delta\":\n{\"content\":\"a\"}}]}\n",
	"data: [DONE]\ndata: " + oneReply(`{"content":"a"}`) + "\n",
	"data: [DONE] \ndata: x\n",
	"data: [DONE]x\n",
	"data: [DONE]",
	"data: [DONE\n",
	"data: [DON",
	"data: [1]\n",
	"data: null\n",
	"data: \"x\"\n",
	"data:\ndata: \n\n: keep-alive\nevent: message\nid: 1\nretry: 5\n" + "data: " + oneReply(`{"content":"a"}`) + "\n",
	"Data: " + oneReply(`{"content":"a"}`) + "\n",
	"data : " + oneReply(`{"content":"a"}`) + "\n",
	"data: {\"error\":{\"message\":\"Internal error\",\"code\":500}}\n",
	"data: {\"error\":\"boom\"}\n",
	"data: {\"error\":{\"message\":\"m\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n",
	"data: {\"error\":null,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n",
	"data: {\"ERROR\":{\"MESSAGE\":\"m\"}}\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"message\":{\"content\":\"whole again\"},\"finish_reason\":\"stop\"}]}\n",
	"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"n\"}}]}\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null,\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-1,\"bytes\":[97],\"top_logprobs\":[]}]}}]}\n",
	"data: {\"x\":" + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}\n",
	// texts over several chunks, a character's escape in each
	strings.Repeat("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ab\\u00e9\\ud83e\\udd14 \",\"reasoning\":\"r\u00e9\"}}]}\n", 5) +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\" \"}}]}\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"length\"}]}\ndata: [DONE]\n",
	strings.Repeat("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"  \\n\"}}]}\n", 4),
	// providers' framing: OpenRouter's comments, reasoning twice and usage-only last chunk; an
	// error event by its event name; llama.cpp's server's "error:" field; its timings
	": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"reasoning\":\"r\",\"reasoning_details\":[{\"type\":\"reasoning.text\",\"text\":\"r\",\"format\":\"unknown\",\"index\":0}]}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"cost\":0.1}}\n\ndata: [DONE]\n\n",
	"event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\nerror: {\"code\":500,\"message\":\"llama\"}\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}],\"timings\":{\"x\":1}}\n\ndata: [DONE]\n\n",
	"data: {\"x\":" + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "}\n",
}

// wireBodies are the bodies oaitest's personalities answer with, by provider, plain and
// streamed, for a normal reply and each fault that has a body.
func wireBodies(t *testing.T) (bodies []wireBody) {
	t.Helper()
	faults := []oaitest.Fault{oaitest.None, oaitest.Malformed, oaitest.Truncated, oaitest.EmptyChoices, oaitest.Length,
		oaitest.ContentFilter, oaitest.EmptyContent, oaitest.ProviderFault, oaitest.StreamCut, oaitest.StreamError,
		oaitest.ServerError, oaitest.BadGateway, oaitest.Unavailable, oaitest.BadRequest, oaitest.Unauthorized, oaitest.RateLimit}
	script := func(r oaitest.Request) oaitest.Response {
		return oaitest.Response{Think: "Ünïcödé reasoning 🤔.\nSecond \"line\".", Content: "<sql>SELECT count(*) FROM t</sql>",
			Usage: &oaitest.Usage{PromptTokens: 100, CompletionTokens: 40, ReasoningTokens: 25, CachedTokens: 60}}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range oaitest.Personalities {
			if !yield(n) {
				return
			}
		}
	})
	on := true
	for _, name := range names {
		p := oaitest.Personalities[name]
		p.ChunkBytes = 5
		for _, stream := range []bool{false, true} {
			srv := oaitest.NewServer(t, script, oaitest.WithPersonality(p), oaitest.WithModels("test-model"),
				oaitest.WithSequence(faults...))
			c, err := New(Endpoint{Name: "t", Provider: p.Name, BaseURL: srv.BaseURL(), Model: "test-model", APIKeyEnv: "",
				Thinking: &on, Stream: stream})
			if err != nil {
				t.Fatal(err)
			}
			body, _, f := c.request([]chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
			if f != nil {
				t.Fatal(f.msg)
			}
			for _, fault := range faults {
				resp, err := http.Post(srv.BaseURL()+"/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, wireBody{fmt.Sprintf("%s stream=%v %s", name, stream, fault), resp.StatusCode,
					resp.Status, resp.Header.Get("Content-Type"), b})
			}
			c.Close()
			srv.Close()
		}
	}
	return bodies
}

type wireBody struct {
	name       string
	status     int
	statusLine string
	ctype      string
	body       []byte
}

// TestReduceMatchesWholeRead: every provider's replies (oaitest's personalities, plain and
// streamed, normal and faulty), and bodies and streams at the edges of JSON, of encoding/json's
// decoding and of the event-stream format, read reduced (the fields the client does not read
// dropped as they arrive) give what reading them whole gave: the same texts, finish, usage,
// model, error object and error, read at once or a byte at a time; a failure response's body
// gives the same message.
func TestReduceMatchesWholeRead(t *testing.T) {
	for _, w := range wireBodies(t) {
		t.Run(w.name, func(t *testing.T) {
			if w.status >= 300 {
				got, err := readFailure(bytes.NewReader(w.body), w.statusLine, nil)
				if want := statusMessage(w.statusLine, w.body); err != nil || got != want {
					t.Errorf("failure message %q, %v; want %q", got, err, want)
				}
				return
			}
			if strings.Contains(w.name, "stream=true") {
				compareReads(t, w.ctype, w.body)
			} else {
				compareReads(t, "", w.body)
			}
		})
	}
	for _, b := range edgeBodies {
		compareReads(t, "", []byte(b))
		compareReads(t, "application/json", []byte(b))
	}
	for _, s := range edgeStreams {
		compareReads(t, "text/event-stream", []byte(s))
	}
}

// FuzzReduceMatchesWholeRead: any body reads reduced as it read whole (compareReads).
func FuzzReduceMatchesWholeRead(f *testing.F) {
	for _, b := range edgeBodies {
		if len(b) < 4096 {
			f.Add([]byte(b), false)
		}
	}
	for _, s := range edgeStreams {
		if len(s) < 4096 {
			f.Add([]byte(s), true)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		if stream {
			compareReads(t, "text/event-stream", body)
		} else {
			compareReads(t, "", body)
		}
	})
}

// TestFailureBodies: a failure response's message is what it was when the body was read whole
// (statusMessage): the provider's message, for bodies past failureHead too; else the body cut,
// a body past failureHead read as its first failureHead bytes (TrimSpace saw its whole tail:
// spaces then more text kept the spaces, now cut off).
func TestFailureBodies(t *testing.T) {
	pad := strings.Repeat(" ", failureHead)
	long := strings.Repeat("x", 2*failureHead)
	for _, body := range []string{
		`{"error":{"message":"Rate limit reached","type":"rate_limit_exceeded","param":null,"code":null}}`,
		`{"error":{"message":"m"},"x":"` + long + `"}`,
		`{"x":"` + long + `","error":{"message":["a","b"]}}`,
		`{"x":"` + long + `","error":{"code":1}}`,
		`{"x":"` + long + `","error":"boom"}`,
		pad + `{"error":{"message":"m"}}` + pad,
		`{"error":{"message":"m"}}` + pad + "x",
		`{"x":1}` + pad + "x",
		`{"x":1}` + pad,
		"<html>" + long + "</html>",
		long,
		`{"error":{"message":"` + long + `"}}`,
		`{"x":"error","\u0065rror":{"message":"m"},"y":"` + long + `"}`,
	} {
		const status = "500 Internal Server Error"
		got, err := readFailure(iotest.OneByteReader(strings.NewReader(body)), status, nil)
		want := statusMessage(status, []byte(body))
		if _, ok := providerError([]byte(body)); !ok && len(body) > failureHead {
			want = bodyMessage(status, []byte(body[:failureHead]))
		}
		if err != nil || got != want {
			t.Errorf("%.80q: %.80q, %v; want %.80q", body, got, err, want)
		}
	}
}

// TestShapesCoverOAI: chunkShape names every member of internal/oai's Completion that
// encoding/json decodes (but a choice's logprobs, raw JSON nothing reads), at every depth, so
// a field added to the wire types is not dropped unread.
func TestShapesCoverOAI(t *testing.T) {
	raw := reflect.TypeFor[json.RawMessage]()
	var walk func(path string, ty reflect.Type, sh *shape)
	walk = func(path string, ty reflect.Type, sh *shape) {
		// What decoding allocates is counted (valueBytes): a pointer's struct, a slice's
		// elements as the slice grows.
		if ty.Kind() == reflect.Pointer && ty.Elem().Kind() == reflect.Struct && sh.newBytes < int(ty.Elem().Size()) {
			t.Errorf("%s: a %d-byte struct a pointer takes, %d counted", path, ty.Elem().Size(), sh.newBytes)
		}
		for ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		switch {
		case ty == raw:
			return // raw JSON: any shape
		case ty.Kind() == reflect.Slice:
			if sh.kind != shapeArray {
				t.Errorf("%s: a list, its shape is of kind %d", path, sh.kind)
				return
			}
			if 4*sh.elemBytes < 25*int(ty.Elem().Size()) {
				t.Errorf("%s: %d bytes counted for each element, under 6.25 times its %d bytes", path, sh.elemBytes, ty.Elem().Size())
			}
			walk(path+"[]", ty.Elem(), sh.elem)
		case ty.Kind() == reflect.Struct:
			if sh.kind != shapeObject {
				t.Errorf("%s: an object, its shape is of kind %d", path, sh.kind)
				return
			}
			for i := range ty.NumField() {
				f := ty.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if f.Anonymous || name == "-" || !f.IsExported() {
					continue
				}
				if name == "" {
					name = f.Name
				}
				m := sh.find([]byte(`"`+name+`"`), false)
				switch {
				case path == "choices[]" && name == "logprobs":
					if m != nil {
						t.Errorf("%s.logprobs is kept", path)
					}
				case m == nil:
					t.Errorf("%s.%s is not in the shape", path, name)
				default:
					walk(strings.TrimPrefix(path+"."+name, "."), f.Type, m)
				}
			}
		default:
			if sh.kind != shapeLeaf && sh.kind != shapeBlank && sh.kind != shapeText {
				t.Errorf("%s: a %s, its shape is of kind %d", path, ty.Kind(), sh.kind)
			}
		}
	}
	walk("", reflect.TypeFor[oai.Completion](), chunkShape)
	// The texts of a reply, and only they, are read aside (cut at the limit on a text).
	for _, m := range []*shape{messageShape, detailShape, reasoningObject} {
		for _, mb := range m.members {
			text := map[string]bool{"content": true, "reasoning_content": true, "text": true, "summary": true}[mb.name]
			if mb.sh.text != text && mb.name != "reasoning" || mb.name == "reasoning" && !mb.sh.text {
				t.Errorf("the member %s is read as a text: %v", mb.name, mb.sh.text)
			}
		}
	}
	// Each text feeds the text of the reply the assembly puts it in.
	for _, c := range []struct {
		sh  *shape
		out int
	}{{messageShape.find([]byte(`"content"`), false), textContent}, {messageShape.find([]byte(`"reasoning_content"`), false), textReasoningContent},
		{reasoningObject, textReasoning}, {reasoningObject.find([]byte(`"text"`), false), textReasoning},
		{reasoningObject.find([]byte(`"summary"`), false), textReasoning}, {detailShape.find([]byte(`"text"`), false), textDetails},
		{detailShape.find([]byte(`"summary"`), false), textDetails}} {
		if c.sh.out != c.out || fieldOrder[max(c.out-1, 0)] == "" {
			t.Errorf("a text shape feeds text %d, want %d", c.sh.out, c.out)
		}
	}
	for _, sh := range []*shape{chunkShape, choiceShape, messageShape, detailShape, reasoningObject, usageShape, errorBodyShape} {
		if len(sh.members) > maxMembers {
			t.Errorf("a shape of %d members, over maxMembers", len(sh.members))
		}
	}
	if errorObject.find([]byte(`"message"`), false) == nil || errorBodyShape.find([]byte(`"error"`), false) != errorObject {
		t.Error("the error object's message is not kept")
	}
}

// cutEdgeBodies are replies whose texts put an escape, a surrogate pair, a character of two to
// four bytes, a byte that is not UTF-8 or a lone surrogate in every place of a cut, across
// strings that one text joins, in lists repeated, reordered and nulled.
var cutEdgeBodies = []string{
	oneReply(`{"content":"ab\u00e9\ud83e\udd14c\u20acd\ud83e\udd14\ud83e\udd14e\"\\\/\b\f\n\r\tf\ud83e\udd14g\u00e9\u00e9\u00e9h\ud83e\udd14ijklmnopqrstuvwxyz0123456789"}`),
	oneReply(`{"content":"xé€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔é€🤔"}`),
	oneReply(`{"content":"a\ud83e\ud83e\udd14b\udd14c\ud83ed\ud83e\u0041e\xff\xfe\xc3f\xe2\x82g\xf0\x9f\xa4hijklmnopqrstuvwxyz0123456789"}`),
	`{"model":"m","choices":[{"index":1,"message":{"content":"\ud83e\udd14\ud83e\udd14\ud83e\udd14\ud83e\udd14"}},{"index":0,"message":{"content":"é€🤔é€🤔é€🤔"}}],"choices":[{"index":0},{"index":1}]}`,
	`{"model":"m","choices":null,"choices":[{"message":{"content":"🤔🤔🤔🤔🤔🤔🤔🤔🤔🤔🤔🤔🤔🤔"}}],"choices":null,"choices":[{"message":{"reasoning":"é€🤔é€🤔é€🤔é€🤔é€🤔"}}]}`,
	`{"model":"m","choices":[{"message":{"content":"é€🤔é€🤔é€🤔é€🤔é€🤔","reasoning_details":[{"type":"reasoning.text","text":"\u00e9\u20ac\ud83e\udd14\u00e9\u20ac"}]}}],"choices":[{"message":{"reasoning_details":null}}],"choices":[{"message":{"reasoning_details":[{"type":"reasoning.summary","summary":"🤔🤔🤔🤔🤔🤔🤔🤔"},{"type":"reasoning.text","text":"€€€€€€€€€€€€"}]}}]}`,
	oneReply(`{"content":"c","reasoning_details":[{"type":"reasoning.text","text":"é€🤔é€🤔é€🤔","summary":{"text":"x"}},{"type":"reasoning.text","text":{"nested":["🤔"]}},{"type":"reasoning.text","text":"\ud83e\udd14\ud83e\udd14\ud83e\udd14\ud83e\udd14\ud83e\udd14"}]}`),
	oneReply(`{"content":"c","reasoning":{"text":"é€🤔é€🤔é€🤔é€🤔","content":"\ud83e\udd14\ud83e\udd14\ud83e\udd14"},"reasoning":{"summary":"€€€€€€€€€€€€€€€€"}}`),
	// texts that end in textcap's marker, which textcap.Cut reads as bytes left out before,
	// whole, escaped, joined from pieces that meet inside it
	oneReply(`{"content":"0123456789012345678901234567890123456789…[truncated 7 bytes]"}`),
	oneReply(`{"content":"abcdefghijklmnopqrstuvwxyz0123456789 \u2026[truncated 99999999 bytes]"}`),
	oneReply(`{"content":"é€🤔é€🤔é€🤔é€🤔…[truncated 0 bytes]","reasoning_details":[{"type":"reasoning.text","text":"0123456789abcdefghij…[trunc"},{"type":"reasoning.text","text":"ated 12 bytes]"}]}`),
	oneReply(`{"content":"abc…[truncated 12345678901234567 bytes]"}`),
}

// TestReduceCutsMatchWholeRead: texts cut at every limit from 1 to 80 bytes, so that each cut
// lands in every place of an escape, a surrogate pair, a character and of the marker, and
// strings that one text joins meet the cut, read reduced as they read whole and cut as the
// Stepper cuts them (textcap.Cut of the whole text): plain and streamed.
func TestReduceCutsMatchWholeRead(t *testing.T) {
	limits := make([]int, 0, 81)
	for l := 0; l <= 80; l++ {
		limits = append(limits, l)
	}
	for _, b := range cutEdgeBodies {
		compareReadsCut(t, "", []byte(b), limits...)
		stream := "data: " + strings.ReplaceAll(b, `"message"`, `"delta"`) + "\n\ndata: " + strings.ReplaceAll(b, `"message"`, `"delta"`) + "\n\ndata: [DONE]\n\n"
		compareReadsCut(t, "text/event-stream", []byte(stream), limits...)
	}
}
