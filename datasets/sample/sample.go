// Package sample is the bundled sample benchmark: four small databases of invented data (a
// lending library, an outpatient clinic, a shop, a transit network), each an SQL script that runs
// unchanged on SQLite, PostgreSQL and MySQL/MariaDB, and questions in BIRD's style with gold SQL
// for each of the three dialects. Everything is embedded in the binary; the package has no
// dependencies beyond the standard library.
package sample

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed questions.json db/*.sql
var files embed.FS

// questionsFile is the embedded question file.
const questionsFile = "questions.json"

// Dialects are the gold SQL dialects every question carries, as keys of Question.Gold.
var Dialects = []string{"sqlite", "postgres", "mysql"}

// Difficulty levels of the questions, as BIRD names them.
const (
	Simple      = "simple"
	Moderate    = "moderate"
	Challenging = "challenging"
)

// Version is a content hash (16 hex digits) of every embedded file: it changes whenever a script
// or a question does, so databases built from an older version can be told apart.
var Version = contentHash()

// Question is one sample question.
type Question struct {
	// ID is the question's number in questions.json, as text ("0", "1", ...).
	ID string `json:"id"`
	// DBID names the database, one of Databases().
	DBID     string `json:"db_id"`
	Question string `json:"question"`
	// Evidence is a BIRD-style hint (external knowledge); may be empty.
	Evidence string `json:"evidence"`
	// Difficulty is Simple, Moderate or Challenging.
	Difficulty string `json:"difficulty"`
	// Gold is the gold SQL per dialect: "sqlite", "postgres" and "mysql".
	Gold map[string]string `json:"gold"`
}

// Databases returns the names of the sample databases, sorted.
func Databases() []string {
	entries, err := fs.ReadDir(files, "db")
	if err != nil {
		panic(fmt.Sprintf("sample: embedded db folder: %v", err)) // the embed pattern guarantees it
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".sql"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Script returns the SQL script that creates and fills database db.
func Script(db string) (string, error) {
	if db == "" || strings.ContainsAny(db, "/\\.") {
		return "", fmt.Errorf("sample: no database %q (have %s)", db, strings.Join(Databases(), ", "))
	}
	b, err := files.ReadFile(path.Join("db", db+".sql"))
	if err != nil {
		return "", fmt.Errorf("sample: no database %q (have %s)", db, strings.Join(Databases(), ", "))
	}
	return string(b), nil
}

// Questions returns the sample questions in file order, checked: every field present, IDs equal
// to their position, known databases and difficulties, gold SQL for every dialect.
func Questions() ([]Question, error) {
	b, err := files.ReadFile(questionsFile)
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	return parseQuestions(b, Databases())
}

// parseQuestions decodes and checks a question file against the known databases.
func parseQuestions(data []byte, dbs []string) ([]Question, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var qs []Question
	if err := dec.Decode(&qs); err != nil {
		return nil, fmt.Errorf("sample: %s: %w", questionsFile, err)
	}
	known := map[string]bool{}
	for _, d := range dbs {
		known[d] = true
	}
	for i, q := range qs {
		where := fmt.Sprintf("sample: %s: record %d (id %q)", questionsFile, i, q.ID)
		switch {
		case q.ID != fmt.Sprint(i):
			return nil, fmt.Errorf("%s: id must be %q, its position", where, fmt.Sprint(i))
		case !known[q.DBID]:
			return nil, fmt.Errorf("%s: unknown db_id %q (have %s)", where, q.DBID, strings.Join(dbs, ", "))
		case strings.TrimSpace(q.Question) == "":
			return nil, fmt.Errorf("%s: empty question", where)
		case q.Difficulty != Simple && q.Difficulty != Moderate && q.Difficulty != Challenging:
			return nil, fmt.Errorf("%s: difficulty %q is not %s, %s or %s", where, q.Difficulty, Simple, Moderate, Challenging)
		}
		for _, d := range Dialects {
			if strings.TrimSpace(q.Gold[d]) == "" {
				return nil, fmt.Errorf("%s: no %s gold SQL", where, d)
			}
		}
		if len(q.Gold) != len(Dialects) {
			return nil, fmt.Errorf("%s: gold has dialects other than %s", where, strings.Join(Dialects, ", "))
		}
	}
	return qs, nil
}

// contentHash hashes every embedded file's path and content in path order.
func contentHash() string {
	h := sha256.New()
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("sample: hashing embedded files: %v", err)) // embedded files are always readable
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
