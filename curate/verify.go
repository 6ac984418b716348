package curate

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/text/unicode/norm"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Rows int `json:"rows"`
	// Agree counts rows whose stored num_tokens and num_trainable_tokens both match the
	// recomputed ones (and whose tokens decode back to the rendered text, NFC-normalised).
	Agree int `json:"agree"`
	// Mismatches lists every disagreeing row, by row index.
	Mismatches []RowCheck `json:"mismatches"`
}

// Agreement is Agree / Rows (1 for an empty dataset).
func (r *VerifyReport) Agreement() float64 {
	if r.Rows == 0 {
		return 1
	}
	return float64(r.Agree) / float64(r.Rows)
}

// RowCheck is one row's stored and recomputed counts.
type RowCheck struct {
	Index               int    `json:"index"`
	Key                 string `json:"key"`
	NumTokens           int64  `json:"num_tokens"`
	RecomputedTokens    int64  `json:"recomputed_tokens"`
	NumTrainable        int64  `json:"num_trainable_tokens"`
	RecomputedTrainable int64  `json:"recomputed_trainable_tokens"`
	Problem             string `json:"problem,omitempty"`
}

// VerifyWith recomputes num_tokens and num_trainable_tokens of every row by a route independent
// of Build's: it encodes the whole rendering at once (Build encodes the pieces between ChatML
// markers, with a cache), checks that the ids decode back to the text, and finds the trainable
// tokens by scanning token ids for <|im_start|> followed by tokens spelling "assistant", then
// counting every token from the header's "\n" through the next <|im_end|> and the "\n" after it
// (Build intersects token byte offsets with the template's character spans). It also checks
// that the ids hold no special token but the ChatML markers the template writes (a message
// holding a special token's text, which Build excludes, fails that). workers
// <= 0 means GOMAXPROCS.
func VerifyWith(ctx context.Context, dir string, tok Tokenizer, workers int) (*VerifyReport, error) {
	ds, err := Open(dir)
	if err != nil {
		return nil, fmt.Errorf("curate verify: %w", err)
	}
	sc, err := newScanner(tok)
	if err != nil {
		return nil, fmt.Errorf("curate verify: %w", err)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type indexed struct {
		i   int
		row *Row
	}
	rep := &VerifyReport{Mismatches: []RowCheck{}}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	rows := make(chan indexed, 4*workers)
	g.Go(func() error {
		defer close(rows)
		i := 0
		return ds.Rows(gctx, func(r *Row) error {
			select {
			case rows <- indexed{i, r}:
			case <-gctx.Done():
				return gctx.Err()
			}
			i++
			return nil
		})
	})
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for it := range rows {
				chk := sc.check(it.row)
				chk.Index = it.i
				mu.Lock()
				rep.Rows++
				if chk.Problem == "" {
					rep.Agree++
				} else {
					rep.Mismatches = append(rep.Mismatches, chk)
				}
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("curate verify %s: %w", dir, err)
	}
	sort.Slice(rep.Mismatches, func(a, b int) bool { return rep.Mismatches[a].Index < rep.Mismatches[b].Index })
	return rep, nil
}

// scanner finds trainable tokens from token ids alone.
type scanner struct {
	tok            Tokenizer
	imStart, imEnd int
	role           string
	special        map[int]string // id -> text of each special token of tok
}

func newScanner(tok Tokenizer) (*scanner, error) {
	s, ok1 := tok.TokenID(chattmpl.ImStart)
	e, ok2 := tok.TokenID(chattmpl.ImEnd)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("tokenizer has no %s/%s tokens: not a ChatML (Qwen2) tokenizer", chattmpl.ImStart, chattmpl.ImEnd)
	}
	special := map[int]string{}
	for text, id := range tok.SpecialIDs() {
		special[id] = text
	}
	return &scanner{tok: tok, imStart: s, imEnd: e, role: chat.RoleAssistant, special: special}, nil
}

func (s *scanner) check(r *Row) RowCheck {
	chk := RowCheck{Key: r.Key, NumTokens: r.NumTokens, NumTrainable: r.NumTrainableTokens}
	msgs := r.Messages
	text, _ := chattmpl.Render(msgs, false)
	ids := s.tok.Encode(text)
	chk.RecomputedTokens = int64(len(ids))
	trainable, blocks, problem := s.trainable(ids)
	chk.RecomputedTrainable = int64(trainable)
	nAssistant := 0
	for _, m := range msgs {
		if m.Role == chat.RoleAssistant {
			nAssistant++
		}
	}
	var problems []string
	if problem != "" {
		problems = append(problems, problem)
	}
	if p := s.specials(msgs, ids); p != "" {
		problems = append(problems, p)
	}
	if blocks != nAssistant {
		problems = append(problems, fmt.Sprintf("found %d assistant blocks in the token ids, the row has %d assistant messages", blocks, nAssistant))
	}
	if chk.RecomputedTokens != r.NumTokens {
		problems = append(problems, "num_tokens differs")
	}
	if chk.RecomputedTrainable != r.NumTrainableTokens {
		problems = append(problems, "num_trainable_tokens differs")
	}
	// The Qwen2 tokenizer NFC-normalises text before splitting it, so ids decode to the
	// rendered text's NFC form.
	if s.tok.Decode(ids) != norm.NFC.String(text) {
		problems = append(problems, "token ids do not decode to the rendered text (NFC)")
	}
	chk.Problem = strings.Join(problems, "; ")
	return chk
}

// specials checks that the only special tokens among ids are the ChatML markers the template
// writes, as many as it writes for msgs' roles (found by rendering them with empty contents);
// a special token in a message's text (which Build excludes) breaks that. It returns the
// problem, "" when there is none.
func (s *scanner) specials(msgs []chat.Message, ids []int) string {
	blank := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		blank[i] = chat.Message{Role: m.Role}
	}
	frame, _ := chattmpl.Render(blank, false)
	want := strings.Count(frame, chattmpl.ImStart)
	starts, ends := 0, 0
	others := map[string]int{}
	for _, id := range ids {
		switch text, ok := s.special[id]; {
		case id == s.imStart:
			starts++
		case id == s.imEnd:
			ends++
		case ok:
			others[text]++
		}
	}
	var p []string
	if starts != want || ends != want {
		p = append(p, fmt.Sprintf("token ids hold %d %s and %d %s where the template writes %d of each", starts, chattmpl.ImStart, ends, chattmpl.ImEnd, want))
	}
	if len(others) > 0 {
		names := make([]string, 0, len(others))
		for text, n := range others {
			names = append(names, fmt.Sprintf("%s ×%d", text, n))
		}
		sort.Strings(names)
		p = append(p, "token ids hold special tokens from message text ("+strings.Join(names, ", ")+")")
	}
	if len(p) > 0 {
		p[len(p)-1] += ": curate build excludes such rows"
	}
	return strings.Join(p, "; ")
}

// trainable counts the tokens of assistant blocks as TRL's Qwen2.5 training template marks them:
// after <|im_start|> and the tokens spelling "assistant", every token from the one holding the
// header's "\n" through the closing <|im_end|>, and the "\n" token after it.
func (s *scanner) trainable(ids []int) (n, blocks int, problem string) {
	for i := 0; i < len(ids); i++ {
		if ids[i] != s.imStart {
			continue
		}
		// Read the role token by token; the first token past it must start with the header's
		// "\n" (alone, or joined with the content's leading newlines).
		acc := ""
		j := i + 1
		assistant := false
		for ; j < len(ids) && ids[j] != s.imEnd && ids[j] != s.imStart; j++ {
			t := s.tok.Decode(ids[j : j+1])
			if len(acc) < len(s.role) && strings.HasPrefix(s.role, acc+t) {
				acc += t
				continue
			}
			assistant = acc == s.role && strings.HasPrefix(t, "\n") ||
				len(acc) < len(s.role) && strings.HasPrefix(acc+t, s.role+"\n")
			break
		}
		if !assistant {
			continue
		}
		blocks++
		k := j
		for k < len(ids) && ids[k] != s.imEnd {
			if ids[k] == s.imStart {
				return n, blocks, fmt.Sprintf("assistant block at token %d has %s before %s", i, chattmpl.ImStart, chattmpl.ImEnd)
			}
			k++
		}
		if k == len(ids) {
			return n, blocks, fmt.Sprintf("assistant block at token %d has no %s", i, chattmpl.ImEnd)
		}
		n += k - j + 1
		if k+1 < len(ids) && ids[k+1] != s.imStart && strings.HasPrefix(s.tok.Decode(ids[k+1:k+2]), "\n") {
			n++
			k++
		}
		i = k
	}
	return n, blocks, ""
}
