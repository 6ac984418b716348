package datasets

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// birdRecord is one entry of BIRD's dev.json/train.json and of the mini-dev files. Pointers tell
// a missing field from an empty one.
type birdRecord struct {
	QuestionID *int    `json:"question_id"`
	DBID       *string `json:"db_id"`
	Question   *string `json:"question"`
	Evidence   *string `json:"evidence"`
	SQL        *string `json:"SQL"`
	Difficulty *string `json:"difficulty"`
}

// birdTask is a decoded, checked BIRD record.
type birdTask struct {
	qid        int // question_id, or the record index when the file has none
	dbID       string
	question   string
	evidence   string
	sql        string
	difficulty string
}

// readBIRD reads and checks a BIRD-format file: db_id, question and SQL are required,
// question_id unique when present, difficulty one of simple/moderate/challenging when present.
func readBIRD(path string) ([]birdTask, error) {
	recs, err := readRecords(path)
	if err != nil {
		return nil, err
	}
	out := make([]birdTask, len(recs))
	seen := make(map[int]int, len(recs))
	for i, raw := range recs {
		var r birdRecord
		if err := decodeRecord(path, i, raw, &r); err != nil {
			return nil, err
		}
		t := birdTask{qid: i, evidence: str(r.Evidence), difficulty: str(r.Difficulty)}
		if r.QuestionID != nil {
			t.qid = *r.QuestionID
			if j, dup := seen[t.qid]; dup {
				return nil, fmt.Errorf("%s: record %d: question_id %d repeats record %d", path, i, t.qid, j)
			}
			seen[t.qid] = i
		}
		if t.dbID, err = required(path, i, "db_id", r.DBID); err != nil {
			return nil, err
		}
		if err := checkDBID(path, i, t.dbID); err != nil {
			return nil, err
		}
		if t.question, err = required(path, i, "question", r.Question); err != nil {
			return nil, err
		}
		if t.sql, err = required(path, i, "SQL", r.SQL); err != nil {
			return nil, err
		}
		switch t.difficulty {
		case "", Simple, Moderate, Challenging:
		default:
			return nil, fmt.Errorf("%s: record %d: difficulty %q is not simple, moderate or challenging", path, i, t.difficulty)
		}
		out[i] = t
	}
	return out, nil
}

// loadBIRD loads BIRD dev.json or train.json (or the dev.json of a folder). Databases are at
// <dir>/dev_databases/<db>/<db>.sqlite, or train_databases for files named train*, unless dbRoot
// is set. IDs are "bird-<file stem>/<question_id>" (the record index when there is none).
func loadBIRD(path, dbRoot string) ([]Task, error) {
	file, err := resolveFile(path, "dev.json")
	if err != nil {
		return nil, err
	}
	recs, err := readBIRD(file)
	if err != nil {
		return nil, err
	}
	split := "dev_databases"
	if strings.HasPrefix(strings.ToLower(filepath.Base(file)), "train") {
		split = "train_databases"
	}
	defRoot := filepath.Join(filepath.Dir(file), split)
	prefix := "bird-" + stem(file)
	tasks := make([]Task, len(recs))
	for i, r := range recs {
		tasks[i] = Task{
			ID: fmt.Sprintf("%s/%d", prefix, r.qid), Index: i, DBID: r.dbID,
			Question: r.question, Evidence: r.evidence, Difficulty: r.difficulty,
			Gold:   map[Dialect]string{SQLite: r.sql},
			Source: "bird", DBPath: sqlitePath(dbRoot, defRoot, r.dbID),
		}
	}
	return tasks, nil
}

// miniDevFiles are BIRD mini-dev's per-dialect files, in the order a folder's primary is chosen.
var miniDevFiles = []struct {
	name    string
	dialect Dialect
}{
	{"mini_dev_sqlite.json", SQLite},
	{"mini_dev_postgresql.json", Postgres},
	{"mini_dev_mysql.json", MySQL},
}

// MiniDevFile is the name of BIRD mini-dev's question file with d's gold SQL
// ("mini_dev_postgresql.json"), "" for a dialect it has none for.
func MiniDevFile(d Dialect) string {
	for _, f := range miniDevFiles {
		if f.dialect == d {
			return f.name
		}
	}
	return ""
}

// loadMiniDev loads BIRD mini-dev from its folder or one of its per-dialect files. The primary
// file (the one named, or for a folder the first present of sqlite, postgresql, mysql) gives the
// tasks and their order; the other files present next to it add their dialect's gold SQL, matched
// by question_id. Databases are at <dir>/dev_databases/<db>/<db>.sqlite unless dbRoot is set.
// IDs are "minidev/<question_id>".
func loadMiniDev(path, dbRoot string) ([]Task, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	dir, primary := path, -1
	if !st.IsDir() {
		dir = filepath.Dir(path)
		for i, f := range miniDevFiles {
			if filepath.Base(path) == f.name {
				primary = i
			}
		}
		if primary < 0 {
			return nil, fmt.Errorf("%s is not a mini-dev file (want mini_dev_sqlite.json, mini_dev_postgresql.json or mini_dev_mysql.json, or their folder)", path)
		}
	}
	present := make([]bool, len(miniDevFiles))
	for i, f := range miniDevFiles {
		if _, err := os.Stat(filepath.Join(dir, f.name)); err == nil {
			present[i] = true
			if primary < 0 {
				primary = i
			}
		}
	}
	if primary < 0 {
		return nil, fmt.Errorf("folder %s has none of mini_dev_sqlite.json, mini_dev_postgresql.json, mini_dev_mysql.json", dir)
	}
	pfile := filepath.Join(dir, miniDevFiles[primary].name)
	recs, err := readBIRD(pfile)
	if err != nil {
		return nil, err
	}
	defRoot := filepath.Join(dir, "dev_databases")
	tasks := make([]Task, len(recs))
	byQID := make(map[int]int, len(recs))
	for i, r := range recs {
		byQID[r.qid] = i
		tasks[i] = Task{
			ID: fmt.Sprintf("minidev/%d", r.qid), Index: i, DBID: r.dbID,
			Question: r.question, Evidence: r.evidence, Difficulty: r.difficulty,
			Gold:   map[Dialect]string{miniDevFiles[primary].dialect: r.sql},
			Source: "minidev", DBPath: sqlitePath(dbRoot, defRoot, r.dbID),
		}
	}
	for i, f := range miniDevFiles {
		if i == primary || !present[i] {
			continue
		}
		file := filepath.Join(dir, f.name)
		other, err := readBIRD(file)
		if err != nil {
			return nil, err
		}
		for j, r := range other {
			k, ok := byQID[r.qid]
			if !ok {
				return nil, fmt.Errorf("%s: record %d: question_id %d is not in %s", file, j, r.qid, pfile)
			}
			if tasks[k].DBID != r.dbID {
				return nil, fmt.Errorf("%s: record %d: question_id %d has db_id %q, %s has %q", file, j, r.qid, r.dbID, pfile, tasks[k].DBID)
			}
			tasks[k].Gold[f.dialect] = r.sql
		}
	}
	return tasks, nil
}
