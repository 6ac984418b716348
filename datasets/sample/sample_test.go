package sample

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestDatabasesAndScripts(t *testing.T) {
	dbs := Databases()
	if strings.Join(dbs, ",") != "clinic,library,shop,transit" {
		t.Fatalf("databases %v", dbs)
	}
	for _, db := range dbs {
		s, err := Script(db)
		if err != nil {
			t.Fatal(err)
		}
		up := strings.ToUpper(s)
		for _, want := range []string{"CREATE TABLE", "PRIMARY KEY", "FOREIGN KEY", "INSERT INTO", "NULL", "''"} {
			if !strings.Contains(up, want) {
				t.Errorf("script %s has no %s", db, want)
			}
		}
	}
	for _, bad := range []string{"", "nope", "../sample", "library.sql", "db/library"} {
		if _, err := Script(bad); err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("Script(%q): %v", bad, err)
		}
	}
}

func TestVersion(t *testing.T) {
	if len(Version) != 16 {
		t.Fatalf("version %q", Version)
	}
	if _, err := hex.DecodeString(Version); err != nil {
		t.Fatalf("version %q: %v", Version, err)
	}
	if contentHash() != Version {
		t.Fatal("content hash is not stable")
	}
}

func TestQuestionsMix(t *testing.T) {
	qs, err := Questions()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 48 {
		t.Fatalf("%d questions, want 48 or more", len(qs))
	}
	ids := map[string]bool{}
	perDB := map[string]int{}
	perLevel := map[string]int{}
	evidence := 0
	for _, q := range qs {
		if ids[q.ID] {
			t.Errorf("duplicate id %s", q.ID)
		}
		ids[q.ID] = true
		perDB[q.DBID]++
		perLevel[q.Difficulty]++
		if q.Evidence != "" {
			evidence++
		}
	}
	for _, db := range Databases() {
		if perDB[db] < 12 {
			t.Errorf("database %s has %d questions, want 12 or more", db, perDB[db])
		}
	}
	// About 40% simple, 40% moderate, 20% challenging.
	for level, want := range map[string]float64{Simple: 0.4, Moderate: 0.4, Challenging: 0.2} {
		if share := float64(perLevel[level]) / float64(len(qs)); share < want-0.08 || share > want+0.08 {
			t.Errorf("%s: %d of %d questions (%.0f%%), want about %.0f%%", level, perLevel[level], len(qs), share*100, want*100)
		}
	}
	if evidence < len(qs)/2 {
		t.Errorf("only %d of %d questions carry evidence", evidence, len(qs))
	}
	// The dialects differ where they must: some gold is written differently per dialect.
	differ := map[string]int{}
	for _, q := range qs {
		for _, d := range Dialects[1:] {
			if q.Gold[d] != q.Gold["sqlite"] {
				differ[d]++
			}
		}
	}
	if differ["postgres"] < 10 || differ["mysql"] < 10 {
		t.Errorf("gold differs from sqlite's in %d postgres and %d mysql questions, want 10 or more each", differ["postgres"], differ["mysql"])
	}
}

func TestParseQuestionsRefusesBadRecords(t *testing.T) {
	dbs := []string{"library"}
	good := `{"id":"0","db_id":"library","question":"Q?","evidence":"","difficulty":"simple","gold":{"sqlite":"SELECT 1","postgres":"SELECT 1","mysql":"SELECT 1"}}`
	if qs, err := parseQuestions([]byte("["+good+"]"), dbs); err != nil || len(qs) != 1 {
		t.Fatalf("good record: %v", err)
	}
	for name, c := range map[string]struct{ rec, want string }{
		"id":         {strings.Replace(good, `"id":"0"`, `"id":"7"`, 1), `id must be "0"`},
		"db":         {strings.Replace(good, `"db_id":"library"`, `"db_id":"zoo"`, 1), `unknown db_id "zoo"`},
		"question":   {strings.Replace(good, `"Q?"`, `" "`, 1), "empty question"},
		"difficulty": {strings.Replace(good, `"simple"`, `"easy"`, 1), `difficulty "easy"`},
		"gold":       {strings.Replace(good, `"mysql":"SELECT 1"`, `"mysql":""`, 1), "no mysql gold"},
		"dialect":    {strings.Replace(good, `"mysql":"SELECT 1"`, `"mysql":"SELECT 1","oracle":"SELECT 1"`, 1), "dialects other than"},
		"field":      {strings.Replace(good, `"evidence"`, `"hint"`, 1), `unknown field "hint"`},
		"json":       {good[:20], "questions.json"},
	} {
		_, err := parseQuestions([]byte("["+c.rec+"]"), dbs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
}
