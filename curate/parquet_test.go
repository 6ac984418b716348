package curate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/chainedsql/chainedsql/rundir"
)

// rewrite replaces a shard with rows (to plant wrong counts for verify).
func rewrite(t *testing.T, path string, rows []Row) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[Row](f, parquet.Compression(&parquet.Zstd))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestParquetGenericReader reads a built shard without the Row type: the footer's schema
// (physical, repetition and logical types as declared for the hub), the codec, and the values
// through parquet-go's untyped reader by leaf column.
func TestParquetGenericReader(t *testing.T) {
	tok := loadTokenizer(t)
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run")
	trajs := []*rundir.Trajectory{handTrajectory("k/1", "alpha", 1), handTrajectory("k/2", "beta", 3)}
	trajs[1].Evidence = "ünïcode évidence"
	writeRun(t, run, trajs, 10)
	out := filepath.Join(tmp, "ds")
	if _, err := Build(context.Background(), []string{run}, BuildOptions{Tokenizer: tok, Out: out}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "data", "train-00000-of-00001.parquet")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	md := pf.Metadata()
	if md.NumRows != 2 {
		t.Fatalf("num_rows = %d", md.NumRows)
	}
	// Footer schema elements, depth first.
	type elem struct {
		name      string
		leafType  string // physical type for leaves, "" for groups
		rep       string
		logical   string
		nChildren int
	}
	var got []elem
	for _, se := range md.Schema[1:] {
		e := elem{name: se.Name, nChildren: int(se.NumChildren.V)}
		if se.Type.Valid {
			e.leafType = se.Type.V.String()
		}
		e.rep = se.RepetitionType.V.String()
		switch se.LogicalType.Value.(type) {
		case *format.StringType:
			e.logical = "STRING"
		case *format.ListType:
			e.logical = "LIST"
		}
		got = append(got, e)
	}
	want := []elem{
		{"messages", "", "REQUIRED", "LIST", 1},
		{"list", "", "REPEATED", "", 1},
		{"element", "", "REQUIRED", "", 2},
		{"role", "BYTE_ARRAY", "REQUIRED", "STRING", 0},
		{"content", "BYTE_ARRAY", "REQUIRED", "STRING", 0},
		{"reasoning", "", "REQUIRED", "LIST", 1},
		{"list", "", "REPEATED", "", 1},
		{"element", "BYTE_ARRAY", "REQUIRED", "STRING", 0},
		{"think_sources", "", "REQUIRED", "LIST", 1},
		{"list", "", "REPEATED", "", 1},
		{"element", "BYTE_ARRAY", "REQUIRED", "STRING", 0},
	}
	for i, w := range want {
		if i >= len(got) || got[i] != w {
			t.Fatalf("schema element %d = %+v, want %+v (all: %+v)", i, got[min(i, len(got)-1)], w, got)
		}
	}
	types := map[string]elem{}
	for _, e := range got[len(want):] {
		types[e.name] = e
	}
	const lists = 3 // messages, reasoning, think_sources
	for _, f := range Features[lists:] {
		e, ok := types[f.Name]
		if !ok {
			t.Errorf("column %s missing from the file", f.Name)
			continue
		}
		wantPhys := map[string]string{"string": "BYTE_ARRAY", "int64": "INT64", "bool": "BOOLEAN", "float64": "DOUBLE"}[f.Type]
		if e.leafType != wantPhys || e.rep != "REQUIRED" || (f.Type == "string") != (e.logical == "STRING") {
			t.Errorf("column %s = %+v, declared %s", f.Name, e, f.Type)
		}
	}
	if len(types) != len(Features)-lists {
		t.Errorf("file has %d scalar columns, Features declares %d", len(types), len(Features)-lists)
	}
	for _, rg := range md.RowGroups {
		for _, c := range rg.Columns {
			if c.MetaData.Codec != format.Zstd {
				t.Errorf("column %v codec %v, want ZSTD", c.MetaData.PathInSchema, c.MetaData.Codec)
			}
		}
	}

	// Values through the untyped reader.
	schema := pf.Schema()
	leaf := func(path ...string) int {
		lc, ok := schema.Lookup(path...)
		if !ok {
			t.Fatalf("no leaf %v", path)
		}
		return lc.ColumnIndex
	}
	roleCol, contentCol := leaf("messages", "list", "element", "role"), leaf("messages", "list", "element", "content")
	keyCol, tokCol, evCol, turnsCol := leaf("key"), leaf("num_tokens"), leaf("evidence"), leaf("turns")
	r := parquet.NewReader(f, schema)
	defer r.Close()
	rows := make([]parquet.Row, 4)
	n, _ := r.ReadRows(rows)
	if n != 2 {
		t.Fatalf("read %d rows", n)
	}
	for i, row := range rows[:n] {
		var roles, contents []string
		var key, ev string
		var ntok, turns int64
		for _, v := range row {
			switch v.Column() {
			case roleCol:
				roles = append(roles, v.String())
			case contentCol:
				contents = append(contents, v.String())
			case keyCol:
				key = v.String()
			case evCol:
				ev = v.String()
			case tokCol:
				ntok = v.Int64()
			case turnsCol:
				turns = v.Int64()
			}
		}
		tr := trajs[i]
		msgs := mustRender(t, tr).Messages
		if key != tr.Key || ev != tr.Evidence || turns != int64(len(tr.Turns)) || ntok <= 0 || len(roles) != len(msgs) || len(contents) != len(msgs) {
			t.Fatalf("row %d: key %q ev %q turns %d tokens %d roles %v", i, key, ev, turns, ntok, roles)
		}
		for j, m := range msgs {
			if roles[j] != m.Role || contents[j] != m.Content {
				t.Errorf("row %d message %d = {%q, %q}", i, j, roles[j], contents[j])
			}
		}
	}
	if !strings.Contains(schema.String(), "messages (LIST)") {
		t.Errorf("schema:\n%s", schema)
	}
}
