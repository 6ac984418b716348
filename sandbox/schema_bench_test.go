package sandbox_test

import (
	"context"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// BenchmarkIntrospectSpider introspects Spider's college_2 (11 tables, 3 samples per column) and
// renders its DDL, on an open database.
func BenchmarkIntrospectSpider(b *testing.B) {
	db, err := sqlite.Open(shared.Path(b, "data/spider/database/college_2/college_2.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := sandbox.Introspect(ctx, db, 3)
		if err != nil {
			b.Fatal(err)
		}
		if s.DDL(datasets.SQLite) == "" || len(s.Tables) != 11 {
			b.Fatalf("%d tables", len(s.Tables))
		}
	}
}
