package datasets

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Spec kinds accepted by ParseSpec and LoadTasks.
const (
	SpecSample  = "sample"
	SpecBIRD    = "bird"
	SpecMiniDev = "minidev"
	SpecSpider  = "spider"
)

// specForms lists the valid spec forms for error messages.
const specForms = `"sample", "bird:PATH" (dev.json or train.json), "minidev:PATH" (folder or mini_dev_{sqlite,mysql,postgresql}.json), "spider:PATH" (dev.json or its folder)`

// Spec is a parsed task spec.
type Spec struct {
	// Kind is one of SpecSample, SpecBIRD, SpecMiniDev, SpecSpider.
	Kind string
	// Path is the file or folder after the colon; empty for SpecSample.
	Path string
}

// String renders the spec back in its textual form.
func (s Spec) String() string {
	if s.Path == "" {
		return s.Kind
	}
	return s.Kind + ":" + s.Path
}

// ParseSpec parses a task spec: "sample", "bird:PATH", "minidev:PATH" or "spider:PATH".
func ParseSpec(spec string) (Spec, error) {
	s := strings.TrimSpace(spec)
	kind, path, hasPath := strings.Cut(s, ":")
	kind = strings.ToLower(kind)
	switch kind {
	case SpecSample:
		if hasPath {
			return Spec{}, fmt.Errorf("datasets: task spec %q: sample takes no path; valid forms: %s", spec, specForms)
		}
		return Spec{Kind: kind}, nil
	case SpecBIRD, SpecMiniDev, SpecSpider:
		if strings.TrimSpace(path) == "" {
			return Spec{}, fmt.Errorf("datasets: task spec %q: %s needs a path (%s:PATH); valid forms: %s", spec, kind, kind, specForms)
		}
		return Spec{Kind: kind, Path: path}, nil
	}
	return Spec{}, fmt.Errorf("datasets: unknown task spec %q; valid forms: %s", spec, specForms)
}

// LoadTasks loads a task spec: "sample", "bird:PATH", "minidev:PATH", "spider:PATH"; dbRoot,
// when not empty, overrides where the SQLite databases are looked for (<dbRoot>/<db>/<db>.sqlite).
// Tasks load without their databases being present; Task.DBPath names where each one would be.
func LoadTasks(spec, dbRoot string) ([]Task, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	var tasks []Task
	switch s.Kind {
	case SpecSample:
		tasks, err = loadSample(dbRoot)
	case SpecBIRD:
		tasks, err = loadBIRD(s.Path, dbRoot)
	case SpecMiniDev:
		tasks, err = loadMiniDev(s.Path, dbRoot)
	case SpecSpider:
		tasks, err = loadSpider(s.Path, dbRoot)
	}
	if err != nil {
		return nil, fmt.Errorf("datasets: load %s: %w", s, err)
	}
	return tasks, nil
}

// resolveFile returns path itself when it is a file, or dir/def when it is a folder.
func resolveFile(path, def string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		p := filepath.Join(path, def)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("folder %s has no %s: %w", path, def, err)
		}
		return p, nil
	}
	return path, nil
}

// readRecords reads a JSON array of objects, keeping each record raw for per-record errors.
func readRecords(path string) ([]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []json.RawMessage
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of records: %w", path, err)
	}
	return recs, nil
}

// decodeRecord decodes record i of file into v, naming the record and the field on error.
func decodeRecord(file string, i int, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%s: record %d: field %q: want %s, got JSON %s", file, i, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%s: record %d: %w", file, i, err)
	}
	return nil
}

// required returns *p, or an error naming the record and the missing or empty field.
func required(file string, i int, field string, p *string) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%s: record %d: missing %q", file, i, field)
	}
	if strings.TrimSpace(*p) == "" {
		return "", fmt.Errorf("%s: record %d: empty %q", file, i, field)
	}
	return *p, nil
}

// checkDBID refuses db_ids that cannot name a folder, a PostgreSQL schema and a MySQL database.
func checkDBID(file string, i int, id string) error {
	if id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") {
		return fmt.Errorf("%s: record %d: db_id %q is not a plain name", file, i, id)
	}
	return nil
}

// sqlitePath is where the SQLite file of db lives: under dbRoot when set, else under def.
func sqlitePath(dbRoot, def, db string) string {
	root := def
	if dbRoot != "" {
		root = dbRoot
	}
	return filepath.Join(root, db, db+".sqlite")
}

// stem is the file name without its extension: ".../dev.json" → "dev".
func stem(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

// str returns *p or "".
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
