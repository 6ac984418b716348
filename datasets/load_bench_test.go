package datasets

import (
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
)

func benchLoad(b *testing.B, spec string, want int) {
	b.ReportAllocs()
	for b.Loop() {
		tasks, err := LoadTasks(spec, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(tasks) != want {
			b.Fatalf("%d tasks", len(tasks))
		}
	}
	b.ReportMetric(float64(want)*float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkLoadBIRDDev loads BIRD dev.json (1,534 questions).
func BenchmarkLoadBIRDDev(b *testing.B) {
	benchLoad(b, "bird:"+shared.Path(b, "data/bird/dev.json"), 1534)
}

// BenchmarkLoadSpiderDev loads Spider dev.json (1,034 questions, hardness computed) and tables.json.
func BenchmarkLoadSpiderDev(b *testing.B) {
	benchLoad(b, "spider:"+shared.Path(b, "data/spider/dev.json"), 1034)
}
