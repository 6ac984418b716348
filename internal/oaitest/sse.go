package oaitest

import (
	"encoding/json"
	"io"
	"net/http"
	"unicode/utf8"
)

// streamDelta is a chunk's delta. Fields a chunk does not carry are absent, as vLLM and the
// others send them (a reasoning delta has no content key).
type streamDelta struct {
	Role             string       `json:"role,omitempty"`
	Content          *string      `json:"content,omitempty"`
	ReasoningContent string       `json:"reasoning_content,omitempty"`
	Reasoning        string       `json:"reasoning,omitempty"`
	ReasoningDetails []wireDetail `json:"reasoning_details,omitempty"`
}

type streamChoice struct {
	Index        int         `json:"index"`
	Delta        streamDelta `json:"delta"`
	FinishReason *string     `json:"finish_reason"`
}

type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *wireUsage     `json:"usage,omitempty"`
}

// pieces splits s into pieces of about n bytes on rune boundaries (a split rune would turn into
// U+FFFD in JSON and change the text).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i := min(n, len(s))
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// chunks renders the reply as the stream's data payloads, in order: the role, the reasoning
// deltas, the content deltas, the finish chunk (with the usage when the personality puts it
// there), and a usage chunk without choices when the request asked for usage.
func (s *Server) chunks(req Request, rp *reply) [][]byte {
	size := s.p.ChunkBytes
	if size <= 0 {
		size = 8
	}
	base := func() streamChunk {
		return streamChunk{ID: rp.id, Object: "chat.completion.chunk", Created: rp.created, Model: rp.model, Choices: []streamChoice{}}
	}
	var out [][]byte
	add := func(c streamChunk) {
		b, err := json.Marshal(c)
		if err != nil {
			panic("oaitest: encoding a chunk: " + err.Error())
		}
		out = append(out, b)
	}
	delta := func(d streamDelta) {
		c := base()
		c.Choices = append(c.Choices, streamChoice{Delta: d})
		add(c)
	}
	if !rp.noChoices {
		empty := ""
		delta(streamDelta{Role: "assistant", Content: &empty})
		for _, p := range pieces(rp.reasoningContent, size) {
			delta(streamDelta{ReasoningContent: p})
		}
		for _, p := range pieces(rp.reasoning, size) {
			d := streamDelta{Reasoning: p}
			if rp.details {
				d.ReasoningDetails = []wireDetail{{Type: "reasoning.text", Text: p, Format: "unknown"}}
			}
			delta(d)
		}
		for _, p := range pieces(rp.content, size) {
			delta(streamDelta{Content: &p})
		}
		c := base()
		fin := rp.finish
		c.Choices = append(c.Choices, streamChoice{FinishReason: &fin})
		if s.p.UsageOnFinish {
			u := rp.usage
			c.Usage = &u
		}
		add(c)
	}
	if req.IncludeUsage && (!s.p.UsageOnFinish || rp.noChoices) {
		c := base()
		u := rp.usage
		c.Usage = &u
		add(c)
	}
	return out
}

// stream writes the reply as server-sent events, applying a stream fault half-way.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, rp *reply, f Fault) {
	chunks := s.chunks(req, rp)
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	keepAlive := func() {
		if s.p.KeepAlive != "" {
			io.WriteString(w, s.p.KeepAlive+"\n\n")
		}
	}
	keepAlive()
	half := len(chunks) / 2
	for i, c := range chunks {
		if i == half {
			switch f {
			case StreamReset:
				if fl != nil {
					fl.Flush()
				}
				resetConn(w, nil)
				return
			case StreamStall:
				if fl != nil {
					fl.Flush()
				}
				select {
				case <-r.Context().Done():
				case <-s.closing:
				}
				return
			case StreamCut:
				return
			case StreamError:
				io.WriteString(w, `data: {"error":{"message":"Internal error while generating (oaitest).","type":"server_error","param":null,"code":500}}`+"\n\n")
				return
			}
		}
		if i > 0 && i%8 == 0 {
			keepAlive()
		}
		if s.p.ChunkDelay > 0 && !s.wait(r.Context(), s.p.ChunkDelay) {
			return
		}
		io.WriteString(w, "data: ")
		w.Write(c)
		io.WriteString(w, "\n\n")
		if fl != nil {
			fl.Flush()
		}
	}
	io.WriteString(w, "data: [DONE]\n\n")
}
