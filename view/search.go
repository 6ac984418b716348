package view

import (
	"context"
	"errors"
	"net/http"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
)

// textRow is the projection of curate.Row that the full-text index reads: the messages, the
// separate reasoning and the final SQL (TestIndexRowMatchesSchema checks it like indexRow).
type textRow struct {
	Messages  []chat.Message `parquet:"messages,list"`
	Reasoning []string       `parquet:"reasoning,list"`
	FinalSQL  string         `parquet:"final_sql"`
}

// textOfRow collects the words of a dataset row: assistant messages split into think block
// and SQL (a reply without parsable SQL counts whole as reasoning), observations (the user
// messages after the question), the reasoning column and the final SQL.
func textOfRow(r *textRow) *rowText {
	rt := newRowText()
	msgs := r.Messages
	for k := 0; ; k++ {
		a, ok := assistantMessage(msgs, k)
		if !ok {
			break
		}
		addReply(rt, a.Content)
		if o, ok := observationMessage(msgs, k); ok {
			rt.add(fieldObservation, o.Content)
		}
	}
	for _, s := range r.Reasoning {
		rt.add(fieldReasoning, s)
	}
	rt.add(fieldSQL, r.FinalSQL)
	return rt
}

// addReply adds an assistant reply: its think block as reasoning and its SQL, or all of it
// as reasoning when it does not parse.
func addReply(rt *rowText, content string) {
	p := protocol.ParseReply(content)
	rt.add(fieldReasoning, p.Think)
	rt.add(fieldSQL, p.SQL)
	if !p.OK {
		rt.add(fieldReasoning, content)
	}
}

// textOfTrajectory collects the words of a run-dir trajectory as textOfRow does for the row
// curate would build from it, plus the observation after the last turn.
func textOfTrajectory(t *rundir.Trajectory) *rowText {
	rt := newRowText()
	for _, tu := range t.Turns {
		addReply(rt, protocol.ReplyContent(tu.Reply()))
		rt.add(fieldReasoning, tu.Reasoning)
		rt.add(fieldSQL, tu.SQL)
		rt.add(fieldObservation, tu.Observation)
	}
	rt.add(fieldSQL, t.FinalSQL)
	return rt
}

// errNoFullText is the index's error when Options.NoFullText turned it off.
var errNoFullText = errors.New("the full-text index is off")

// startText starts building a dataset's full-text index in the background (Close stops it).
func (s *Server) startText(ctx context.Context) {
	if s.opts.NoFullText {
		s.text.finish(errNoFullText)
		close(s.textDone)
		return
	}
	tctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopText = stop
	go func() {
		defer close(s.textDone)
		s.buildText(tctx)
	}()
}

// buildText reads the text columns of every dataset row into the full-text index; rows of
// row groups that do not decode are left out (their rows already show the error).
func (s *Server) buildText(ctx context.Context) {
	total := 0
	for _, d := range s.datasets {
		total += int(d.ds.NumRows)
	}
	s.text.mu.Lock()
	s.text.total = total
	s.text.mu.Unlock()
	base := 0
	for _, d := range s.datasets {
		err := scan(ctx, d, func(i int, r *textRow) { s.text.add(base+i, textOfRow(r)) }, func(int, error) {})
		if err != nil {
			s.text.finish(err)
			return
		}
		base += int(d.ds.NumRows)
	}
	s.text.finish(nil)
}

// WaitSearch blocks until the full-text index is complete or ctx ends.
func (s *Server) WaitSearch(ctx context.Context) error {
	select {
	case <-s.textDone:
		s.text.mu.RLock()
		defer s.text.mu.RUnlock()
		return s.text.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Query answers a table query, through the full-text index when q has a full-text part (an
// error wrapping errSearchNotReady while that index is being built). The page counts the
// labels of the rows matching q without its label filter, as for a facet (its note and
// labelled filters kept).
func (s *Server) Query(q Query) (Page, error) {
	text, err := s.textHits(q)
	if err != nil {
		return Page{}, err
	}
	p := s.ix.Query(q, intersect(text, s.annotationHits(q)))
	if s.annotated() {
		wide := q
		wide.Labels, wide.Sort = nil, ""
		pre := intersect(text, s.annotationHits(wide))
		s.ix.mu.RLock()
		hits, _ := s.ix.matches(wide, pre)
		p.Labels = s.labelCounts(hits)
		s.ix.mu.RUnlock()
		for i := range p.Rows {
			r := &p.Rows[i]
			if e, ok := s.ix.get(r.ID); ok {
				if an, ok := s.annotationOf(e); ok {
					r.Labels, r.Noted = an.Labels, an.Note != ""
				}
			}
		}
	}
	return p, nil
}

// textHits is the bitmap of the rows q's full-text part matches; nil when it has none.
func (s *Server) textHits(q Query) ([]uint64, error) {
	if len(queryWords(q.FullText)) == 0 {
		return nil, nil
	}
	return s.text.match(q.FullText, q.In, s.ix.len())
}

// preHits is the bitmap of the rows q's full-text and annotation filters keep; nil when it
// has neither.
func (s *Server) preHits(q Query) ([]uint64, error) {
	text, err := s.textHits(q)
	if err != nil {
		return nil, err
	}
	return intersect(text, s.annotationHits(q)), nil
}

// serveQuery answers a request whose parameters are a Query (400 when they are not one) with
// what answer makes of it.
func serveQuery[T any](w http.ResponseWriter, r *http.Request, answer func(Query) (T, error)) {
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	v, err := answer(q)
	if err != nil {
		httpError(w, searchErrorStatus(err), err)
		return
	}
	writeJSON(w, v)
}

// searchErrorStatus is the HTTP status of a query's error: 503 while the index is built.
func searchErrorStatus(err error) int {
	if errors.Is(err, errSearchNotReady) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
