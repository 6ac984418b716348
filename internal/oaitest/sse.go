package oaitest

import (
	"encoding/json"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/internal/oai"
)

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
	base := func() oai.Completion {
		return oai.Completion{ID: rp.id, Object: oai.ObjectChunk, Created: rp.created, Model: rp.model, Choices: []oai.Choice{}}
	}
	var out [][]byte
	add := func(c oai.Completion) {
		b, err := json.Marshal(c)
		if err != nil {
			panic("oaitest: encoding a chunk: " + err.Error())
		}
		out = append(out, b)
	}
	delta := func(d oai.Delta) {
		c := base()
		c.Choices = append(c.Choices, oai.Choice{Delta: &d})
		add(c)
	}
	if !rp.noChoices {
		empty := ""
		delta(oai.Delta{Role: "assistant", Content: &empty})
		both := rp.reasoning != "" && rp.reasoning == rp.reasoningContent
		for _, p := range pieces(rp.reasoningContent, size) {
			d := oai.Delta{ReasoningContent: oai.Str(p)}
			if both {
				d.Reasoning = oai.Text(p) // one delta carries both fields (vLLM during the rename)
			}
			delta(d)
		}
		for _, p := range pieces(rp.reasoning, size) {
			if both {
				break
			}
			d := oai.Delta{Reasoning: oai.Text(p)}
			if rp.details {
				d.ReasoningDetails = []oai.Detail{{Type: "reasoning.text", Text: p, Format: "unknown"}}
			}
			delta(d)
		}
		for _, p := range pieces(rp.content, size) {
			delta(oai.Delta{Content: &p})
		}
		c := base()
		fin := rp.finish
		c.Choices = append(c.Choices, oai.Choice{Delta: &oai.Delta{}, FinishReason: &fin})
		if s.p.SnapshotOnFinish {
			c.Choices[0].Message = rp.completion().Choices[0].Message
		}
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
