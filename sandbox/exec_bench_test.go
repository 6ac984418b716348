package sandbox_test

import (
	"context"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
	"github.com/chainedsql/chainedsql/sandbox/sqlite"
)

// execBenchQueries are short Spider-style queries on concert_singer.
var execBenchQueries = []string{
	"SELECT count(*) FROM singer",
	"SELECT name, country, age FROM singer ORDER BY age DESC",
	"SELECT avg(age), min(age), max(age) FROM singer WHERE country = 'France'",
	"SELECT T1.concert_name, count(*) FROM concert AS T1 JOIN singer_in_concert AS T2 ON T1.concert_id = T2.concert_id GROUP BY T1.concert_id, T1.concert_name",
}

// benchDB opens Spider's concert_singer in dialect d, copying it to the server first.
func benchDB(b *testing.B, d datasets.Dialect) sandbox.DB {
	src := shared.Path(b, "data/spider/database/concert_singer/concert_singer.sqlite")
	if d == datasets.SQLite {
		db, err := sqlite.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	target := sandboxtest.SrvName("cs_bench")
	admin, dsn := sandboxtest.CopyServer(b, d)
	b.Cleanup(func() { sandboxtest.DropCopy(admin, d, target) })
	var db sandbox.DB
	_, err := sandbox.CopySQLite(ctx, src, d, dsn, target)
	if err == nil {
		db, err = sandboxtest.OpenCopy(b, ctx, d, dsn, target)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkExec measures executions/s of short queries through DB.Exec (screening, read-only
// transaction and time limit included), one caller at a time and from parallel callers.
func BenchmarkExec(b *testing.B) {
	for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL} {
		db := benchDB(b, d)
		ctx := context.Background()
		for _, q := range execBenchQueries {
			if r, err := db.Exec(ctx, q, sandbox.ExecOptions{}); err != nil || !r.OK() {
				b.Fatalf("%s: %s: %+v %v", d, q, r, err)
			}
		}
		b.Run(string(d)+"/serial", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := db.Exec(ctx, execBenchQueries[i%len(execBenchQueries)], sandbox.ExecOptions{MaxRows: 50}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "execs/s")
		})
		b.Run(string(d)+"/parallel", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, err := db.Exec(ctx, execBenchQueries[i%len(execBenchQueries)], sandbox.ExecOptions{MaxRows: 50}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "execs/s")
		})
	}
}
