package curate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// writeRun writes trajectories as a distill run dir: shards/TEACHER.DIALECT.NNNN.jsonl with
// perShard lines each, the journal of committed lines, and a manifest.
func writeRun(tb testing.TB, dir string, trajs []*rundir.Trajectory, perShard int) {
	tb.Helper()
	w := newRunWriter(tb, dir, perShard)
	for _, t := range trajs {
		w.add(t)
	}
	w.close()
}

type runWriter struct {
	tb       testing.TB
	dir      string
	perShard int
	files    map[string]*shardFile
	journal  *os.File
	jw       *bufio.Writer
}

type shardFile struct {
	name string
	f    *os.File
	bw   *bufio.Writer
	n    int
	next int
	end  int64
}

func newRunWriter(tb testing.TB, dir string, perShard int) *runWriter {
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
		tb.Fatal(err)
	}
	man := map[string]any{"format": rundir.RunFormat, "protocol": protocol.ProtocolVersion, "toolkit": "test"}
	b, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		tb.Fatal(err)
	}
	j, err := os.Create(filepath.Join(dir, rundir.JournalFile))
	if err != nil {
		tb.Fatal(err)
	}
	return &runWriter{tb: tb, dir: dir, perShard: perShard, files: map[string]*shardFile{}, journal: j, jw: bufio.NewWriter(j)}
}

func (w *runWriter) add(t *rundir.Trajectory) {
	prefix := t.Teacher + "." + string(t.Dialect)
	sf := w.files[prefix]
	if sf == nil || sf.n == w.perShard {
		next := 0
		if sf != nil {
			w.closeFile(sf)
			next = sf.next + 1
		}
		name := rundir.ShardName(t.Teacher, t.Dialect, next)
		f, err := os.Create(filepath.Join(w.dir, "shards", name))
		if err != nil {
			w.tb.Fatal(err)
		}
		sf = &shardFile{name: name, f: f, bw: bufio.NewWriterSize(f, 1<<20), next: next}
		w.files[prefix] = sf
	}
	b, err := json.Marshal(t)
	if err != nil {
		w.tb.Fatal(err)
	}
	sf.bw.Write(b)
	sf.bw.WriteByte('\n')
	sf.n++
	sf.end += int64(len(b)) + 1
	je, _ := json.Marshal(rundir.JournalEntry{Key: t.Key, Task: t.TaskID, Teacher: t.Teacher, Dialect: t.Dialect, Sample: t.Sample, Shard: sf.name, End: sf.end})
	w.jw.Write(je)
	w.jw.WriteByte('\n')
}

func (w *runWriter) closeFile(sf *shardFile) {
	if err := sf.bw.Flush(); err != nil {
		w.tb.Fatal(err)
	}
	if err := sf.f.Close(); err != nil {
		w.tb.Fatal(err)
	}
}

func (w *runWriter) close() {
	for _, sf := range w.files {
		w.closeFile(sf)
	}
	if err := w.jw.Flush(); err != nil {
		w.tb.Fatal(err)
	}
	if err := w.journal.Close(); err != nil {
		w.tb.Fatal(err)
	}
}

// synth makes realistic trajectories: a schema-sized system prompt shared by all tasks on one
// database and dialect (about 1,300 tokens), a question, 1–5 assistant turns of
// <think>…</think>\n<sql>…</sql> with observations, some format violations.
type synth struct {
	rng     *rand.Rand
	systems map[string]string
}

var (
	synthTeachers = []string{"gpt-oss", "deepseek", "glm", "qwen"}
	synthDialects = []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL}
	synthDBs      = []string{"california_schools", "card_games", "codebase_community", "debit_card_specializing", "european_football_2", "financial", "formula_1", "student_club", "superhero", "thrombosis_prediction", "toxicology"}
	synthDiff     = []string{"simple", "moderate", "challenging"}
	words         = strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three")
	columns       = strings.Fields("id name code amount date status county district school city zip phone type rating score height weight price total count label year month category region gender value")
)

func newSynth(seed uint64) *synth {
	return &synth{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), systems: map[string]string{}}
}

func (s *synth) words(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[s.rng.IntN(len(words))])
	}
	return b.String()
}

func (s *synth) system(db string, d datasets.Dialect) string {
	k := db + "/" + string(d)
	if sys, ok := s.systems[k]; ok {
		return sys
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You are a %s expert. Dialect: %s. Answer the question with one SQL statement.\n", d, d)
	b.WriteString("Rules: reply as <think>your reasoning</think> then <sql>one statement</sql>. The statement runs read-only; ")
	b.WriteString("its result comes back as <observation>. Repeat the same SQL to finish.\n\nSchema:\n")
	for t := 0; t < 9; t++ {
		fmt.Fprintf(&b, "CREATE TABLE %s_%d (\n", db, t)
		for c := 0; c < 8; c++ {
			col := columns[s.rng.IntN(len(columns))]
			fmt.Fprintf(&b, "  %s_%d %s, -- e.g. %d, '%s', %d\n", col, c, []string{"INTEGER", "TEXT", "REAL", "DATE"}[s.rng.IntN(4)],
				s.rng.IntN(10000), words[s.rng.IntN(len(words))], s.rng.IntN(100))
		}
		b.WriteString(");\n")
	}
	sys := b.String()
	s.systems[k] = sys
	return sys
}

func (s *synth) sql(db string) string {
	return fmt.Sprintf("SELECT T1.%s_%d, COUNT(*) FROM %s_%d AS T1 JOIN %s_%d AS T2 ON T1.id_0 = T2.id_0 WHERE T2.%s_%d > %d GROUP BY T1.%s_%d ORDER BY 2 DESC LIMIT %d;",
		columns[s.rng.IntN(len(columns))], s.rng.IntN(8), db, s.rng.IntN(9), db, s.rng.IntN(9),
		columns[s.rng.IntN(len(columns))], s.rng.IntN(8), s.rng.IntN(1000), columns[s.rng.IntN(len(columns))], s.rng.IntN(8), 1+s.rng.IntN(20))
}

func (s *synth) observation() string {
	var b strings.Builder
	b.WriteString("<observation>\nname | count\n")
	n := s.rng.IntN(12)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s %s | %d\n", words[s.rng.IntN(len(words))], words[s.rng.IntN(len(words))], s.rng.IntN(5000))
	}
	fmt.Fprintf(&b, "(%d rows)\n</observation>", n)
	return b.String()
}

// trajectory makes the i-th trajectory of a synthetic run.
func (s *synth) trajectory(i int) *rundir.Trajectory {
	teacher := synthTeachers[i%len(synthTeachers)]
	d := synthDialects[(i/len(synthTeachers))%len(synthDialects)]
	task := i / (len(synthTeachers) * len(synthDialects))
	db := synthDBs[task%len(synthDBs)]
	t := &rundir.Trajectory{
		Protocol: protocol.ProtocolVersion, Key: fmt.Sprintf("bird-dev/%d/%s/%s/0", task, teacher, d),
		TaskID: fmt.Sprintf("bird-dev/%d", task), TaskIndex: task, Source: "bird-dev", DBID: db,
		Question: s.words(12+s.rng.IntN(20)) + "?", Difficulty: synthDiff[s.rng.IntN(3)], Dialect: d,
		Teacher: teacher, Model: teacher + "-model", Sample: 0,
		GoldSQL: s.sql(db), Started: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if s.rng.IntN(2) == 0 {
		t.Evidence = s.words(10)
	}
	user := "Question: " + t.Question
	if t.Evidence != "" {
		user += "\nEvidence: " + t.Evidence
	}
	t.System, t.Prompt = s.system(db, d), user
	turns := []int{1, 2, 2, 2, 3, 3, 4, 5}[s.rng.IntN(8)]
	last := ""
	for k := 0; k < turns; k++ {
		sql := s.sql(db)
		if k == turns-1 && turns > 1 {
			sql = last
		}
		reply := "<think>" + s.words(60+s.rng.IntN(200)) + "</think>\n<sql>" + sql + "</sql>"
		turn := rundir.Turn{Index: k, Content: reply, SQL: sql, Reasoning: s.words(s.rng.IntN(3) * 20)}
		if s.rng.IntN(25) == 0 {
			reply = s.words(40) // no <sql>: a format violation
			turn.Content, turn.SQL, turn.FormatViolation = reply, "", true
			t.FormatViolations++
		} else {
			turn.Exec = &rundir.ExecRecord{Outcome: sandbox.OutcomeOK, Total: 3}
		}
		turn.Observation = s.observation()
		t.Turns = append(t.Turns, turn)
		last = sql
	}
	t.FinalSQL = last
	t.Repeated = turns > 1 && s.rng.IntN(5) > 0
	t.ExecOK = s.rng.IntN(10) > 0
	t.Correct = t.ExecOK && s.rng.IntN(2) == 0
	t.Usage = chat.Usage{PromptTokens: 1000 * turns, CompletionTokens: 300 * turns}
	return t
}
