package env

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rundir"
)

// episodeBound is the most an episode of five turns may keep (docs/ENV.md): per turn the
// reply's content and reasoning (textcap.EnvReply each), its statement (textcap.SQL), its
// observation (twice the 8,000-character cap), its error and column names (textcap.Error,
// textcap.Names); plus the final result's error and names and the gold's error.
const episodeBound = 5*(2*textcap.EnvReply+textcap.SQL+2*8000+textcap.Error+textcap.Names) + 3*textcap.Error

// TestEpisodeMemoryBound feeds one episode the largest replies a request may carry, a statement
// whose error echoes a huge value, a statement far over the statement limit, a result with
// huge column names and a huge cell, and checks that every step's answer is small, that no step
// adds more to the store's count than it reserved (stepGrowth), and that the episode store
// keeps at most episodeBound bytes for it (the heap with the episode stored, less the heap once
// it is deleted).
func TestEpisodeMemoryBound(t *testing.T) {
	tasks := tasksOf(t)[:1]
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			// With the episode log on: logging the finished episode keeps nothing of it.
			lg, err := rundir.OpenLog(t.TempDir(), &rundir.Manifest{Format: rundir.RunFormat})
			if err != nil {
				t.Fatal(err)
			}
			defer lg.Close()
			cfg := Config{Tasks: tasks, Dialects: []datasets.Dialect{d}, MaxBody: 16 << 20, Log: lg}
			// A statement whose error is huge: SQLite names the missing table, PostgreSQL
			// echoes the value that failed the cast (40 MB).
			hugeError := `SELECT * FROM "` + strings.Repeat("n", 60000) + `"`
			// (8 MB: under the 8 MiB a SQLite value may hold, datasets.sqliteMaxValue.)
			wide := `SELECT printf('%.*c', 8000000, 'x') AS "` + strings.Repeat("c", 30000) + `", 2 AS "` + strings.Repeat("d", 30000) + `"`
			if d == datasets.Postgres {
				cfg.Opener = freshPostgres(t, tasks)
				hugeError = `SELECT repeat('9', 40000000)::int`
				wide = `SELECT repeat('x', 10000000) AS "` + strings.Repeat("c", 60) + `"`
			}
			s, url := testServer(t, cfg)
			ep := start(t, url, tasks[0].ID, string(d))
			big := strings.Repeat("a", 6<<20)
			replies := []map[string]string{
				{"content": "<think>" + big[:3<<20] + "</think>\n<sql>" + hugeError + "</sql>", "reasoning": big[:3<<20]},
				{"content": answer("SELECT 1 -- " + big[:1<<20])},
				{"content": big, "reasoning": big[:4<<20]},
				{"content": answer(wide)},
				{"content": answer(hugeError)},
			}
			wantOutcome := []string{"error", "refused", "format_violation", "ok", "error"}
			size := func() int64 {
				s.store.mu.Lock()
				defer s.store.mu.Unlock()
				return s.store.m[ep.EpisodeID].size
			}
			for i, rp := range replies {
				was := size()
				var body json.RawMessage
				if err := post(http.DefaultClient, url+"/v1/episodes/"+ep.EpisodeID+"/step", rp, &body); err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				content := rp["content"]
				if added, room := size()-was, stepGrowth(reply{Content: &content, Reasoning: rp["reasoning"]}, i, s.cfg.Episode.Caps, s.cfg.Episode.ReplyCap); added > room {
					t.Errorf("step %d added %d bytes to the store's count, over the %d it reserved", i+1, added, room)
				}
				var st wireStep
				if err := json.Unmarshal(body, &st); err != nil || st.Error != nil {
					t.Fatalf("step %d: %v %+v", i+1, err, st.Error)
				}
				if len(body) > 160<<10 || len(st.Info.Error) > textcap.Error || len(st.Info.SQL) > textcap.SQL {
					t.Errorf("step %d: an answer of %d bytes, info.error %d, info.sql %d", i+1, len(body), len(st.Info.Error), len(st.Info.SQL))
				}
				if st.Info.Outcome != wantOutcome[i] {
					t.Errorf("step %d: outcome %s (%.200s), want %s", i+1, st.Info.Outcome, st.Info.Error, wantOutcome[i])
				}
				if i == 0 && !strings.Contains(st.Info.Error, " bytes]") {
					t.Errorf("step 1: the error is not marked as cut: %.300s", st.Info.Error)
				}
			}
			var got wireEpisode
			if code := call(t, "GET", url+"/v1/episodes/"+ep.EpisodeID, nil, &got); code != 200 || len(got.Messages) != 2+5+4 {
				t.Fatalf("get: %d, %d messages", code, len(got.Messages))
			}
			for _, m := range got.Messages[2:] {
				if len(m.Content) > textcap.EnvReply+textcap.SQL {
					t.Errorf("a %s message of %d bytes", m.Role, len(m.Content))
				}
			}
			got = wireEpisode{}

			counted := size()
			with := heapInUse()
			if code := call(t, "DELETE", url+"/v1/episodes/"+ep.EpisodeID, nil, nil); code != 200 {
				t.Fatalf("delete: %d", code)
			}
			without := heapInUse()
			kept := with - without
			t.Logf("%s: the episode kept %d bytes (bound %d), the store counted %d", d, kept, episodeBound, counted)
			if kept > episodeBound {
				t.Errorf("the episode kept %d bytes, over the documented bound of %d", kept, episodeBound)
			}
			if float64(counted) < 0.8*float64(kept) {
				t.Errorf("the store counted %d bytes for an episode that kept %d", counted, kept)
			}
			if stored, _ := s.Episodes(); stored != 0 {
				t.Fatalf("%d episodes stored after the delete", stored)
			}
			n := 0
			for tr, err := range rundir.Trajectories(lg.Dir()) {
				if err != nil || len(tr.Turns) != 5 {
					t.Fatalf("the log: %v", err)
				}
				n++
			}
			if n != 1 {
				t.Errorf("the log holds %d episodes, want 1", n)
			}
		})
	}
}

// TestWriteJSONNotFinite: a reply that cannot encode (a non-finite number) is a 500 that says
// so, not a 200 with an empty body.
func TestWriteJSONNotFinite(t *testing.T) {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]float64{"total": math.Inf(1)})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "does not encode as JSON") {
		t.Errorf("%d %q", rec.Code, rec.Body.String())
	}
}
