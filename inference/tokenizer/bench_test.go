package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// benchCorpus builds a deterministic text of about size bytes in documents of 1–12 KiB that
// look like agentic Text-to-SQL trajectories: English prose with some accented and CJK
// words, SQL queries, <think>/<sql> blocks and <observation> result tables.
func benchCorpus(size int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields(`the of and to in is that for it as was with be by on not he this are or his from at which
		but have an they you were their one all we can her has there been if more when will would who so no
		schools county district average score students enrollment number total percentage free meal eligible
		question evidence refers column table join filter order group result rows first last highest lowest
		query returns customers orders product price date year month account transaction balance loan client`)
	rare := []string{"café", "naïve", "Zürich", "São Paulo", "Ångström", "北京", "東京都", "서울", "Москва", "résumé", "ﬁnance", "日本語の文章"}
	tables := []string{"frpm", "schools", "satscores", "account", "client", "loan", "trans", "district", "card", "disp"}
	cols := []string{"`County Name`", "CDSCode", "\"Free Meal Count (K-12)\"", "NumTstTakr", "AvgScrMath", "account_id", "amount", "date", "A11", "gender", "birth_date", "district_id"}
	ops := []string{"=", ">", "<", ">=", "<=", "<>", "LIKE"}
	prose := func(b *strings.Builder, n int) {
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			w := words[r.IntN(len(words))]
			if r.IntN(40) == 0 {
				w = rare[r.IntN(len(rare))]
			}
			if (i == 0 || r.IntN(12) == 0) && w[0] >= 'a' && w[0] <= 'z' {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
			switch r.IntN(14) {
			case 0:
				b.WriteString(",")
			case 1:
				b.WriteString(".")
			case 2:
				fmt.Fprintf(b, " %d", r.IntN(5000))
			}
		}
		b.WriteString(".")
	}
	sql := func(b *strings.Builder) {
		t1, t2 := tables[r.IntN(len(tables))], tables[r.IntN(len(tables))]
		fmt.Fprintf(b, "SELECT T1.%s, COUNT(T2.%s) AS n\nFROM %s AS T1\nINNER JOIN %s AS T2 ON T1.%s = T2.%s\nWHERE T1.%s %s %d AND T2.%s %s '%s'\nGROUP BY T1.%s\nORDER BY n DESC\nLIMIT %d;",
			cols[r.IntN(len(cols))], cols[r.IntN(len(cols))], t1, t2, cols[r.IntN(len(cols))], cols[r.IntN(len(cols))],
			cols[r.IntN(len(cols))], ops[r.IntN(len(ops))], r.IntN(100000), cols[r.IntN(len(cols))], ops[r.IntN(len(ops))],
			words[r.IntN(len(words))], cols[r.IntN(len(cols))], 1+r.IntN(10))
	}
	obs := func(b *strings.Builder) {
		b.WriteString("<observation>\n")
		nc := 2 + r.IntN(4)
		for c := 0; c < nc; c++ {
			if c > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(strings.Trim(cols[r.IntN(len(cols))], "`\""))
		}
		b.WriteByte('\n')
		nr := 1 + r.IntN(20)
		for row := 0; row < nr; row++ {
			for c := 0; c < nc; c++ {
				if c > 0 {
					b.WriteString(" | ")
				}
				switch r.IntN(4) {
				case 0:
					fmt.Fprintf(b, "%d", r.IntN(1000000))
				case 1:
					fmt.Fprintf(b, "%.4f", r.Float64()*1000)
				case 2:
					fmt.Fprintf(b, "%04d-%02d-%02d", 1990+r.IntN(35), 1+r.IntN(12), 1+r.IntN(28))
				default:
					b.WriteString(words[r.IntN(len(words))] + " " + words[r.IntN(len(words))])
				}
			}
			b.WriteByte('\n')
		}
		fmt.Fprintf(b, "(%d rows)\n</observation>", nr)
	}
	var docs []string
	total := 0
	for total < size {
		var b strings.Builder
		target := 1024 + r.IntN(11*1024)
		for b.Len() < target {
			switch r.IntN(4) {
			case 0:
				b.WriteString("<think>\n")
				prose(&b, 20+r.IntN(120))
				b.WriteString("\n</think>\n<sql>\n")
				sql(&b)
				b.WriteString("\n</sql>\n")
			case 1:
				obs(&b)
				b.WriteString("\n")
			case 2:
				b.WriteString("Question: ")
				prose(&b, 10+r.IntN(30))
				b.WriteString("\nEvidence: ")
				prose(&b, 5+r.IntN(20))
				b.WriteString("\n\n")
			default:
				b.WriteString("CREATE TABLE " + tables[r.IntN(len(tables))] + " (\n")
				for c := 0; c < 3+r.IntN(6); c++ {
					fmt.Fprintf(&b, "    %s TEXT, -- e.g. '%s', '%s'\n", cols[r.IntN(len(cols))], words[r.IntN(len(words))], rare[r.IntN(len(rare))])
				}
				b.WriteString(");\n\n")
			}
		}
		docs = append(docs, b.String())
		total += b.Len()
	}
	return docs
}

var (
	corpusOnce sync.Once
	corpus     []string
)

func benchDocs() []string {
	corpusOnce.Do(func() { corpus = benchCorpus(10 << 20) })
	return corpus
}

// BenchmarkEncode encodes the 10 MiB corpus document by document and reports tokens/s (one
// goroutine, so per core with -cpu 1).
//
//	go test -run '^$' -bench 'BenchmarkEncode' -benchtime 5x -cpu 1 ./inference/tokenizer
func BenchmarkEncode(b *testing.B) {
	benchEncode(b, false, false)
}

// BenchmarkEncodeOffsets is BenchmarkEncode with byte offsets.
func BenchmarkEncodeOffsets(b *testing.B) {
	benchEncode(b, true, false)
}

// BenchmarkEncodeCold is BenchmarkEncode with the word cache emptied before each pass.
func BenchmarkEncodeCold(b *testing.B) {
	benchEncode(b, false, true)
}

func benchEncode(b *testing.B, offsets, cold bool) {
	tok := qwen(b)
	docs := benchDocs()
	size := 0
	for _, d := range docs {
		size += len(d)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	tokens := 0
	b.ResetTimer()
	for b.Loop() {
		if cold {
			tok.mu.Lock()
			tok.free = nil
			tok.mu.Unlock()
		}
		tokens = 0
		for _, d := range docs {
			if offsets {
				ids, _ := tok.EncodeOffsets(d)
				tokens += len(ids)
			} else {
				tokens += len(tok.Encode(d))
			}
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(tokens)/sec, "tokens/s")
	b.ReportMetric(float64(tokens), "tokens")
}

// TestBenchCorpusRoundTrip keeps the benchmark corpus honest: a slice of it round-trips.
func TestBenchCorpusRoundTrip(t *testing.T) {
	tok := qwen(t)
	for i, d := range benchCorpus(64 << 10) {
		ids, offs := tok.EncodeOffsets(d)
		checkOffsets(t, tok, d, ids, offs)
		if got := tok.Decode(ids); got != d {
			t.Fatalf("document %d does not round-trip", i)
		}
	}
}
