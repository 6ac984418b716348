package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/qwen2"
	"github.com/chainedsql/chainedsql/inference/student"
)

func init() {
	register("logits", "print the logits of every position for given token ids as JSON (parity checks)", runLogits)
}

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, mf := newModelFlagSet("logits", stderr)
	idList := fs.String("ids", "", "comma-separated token ids, e.g. 151644,872,198 (required)")
	top := fs.Int("top", 0, "print only the N largest logits of each position as [id, logit] pairs (0: all)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: student logits --model DIR --ids 1,2,3 [--top N] [--dtype ...] [--threads N] [--backend cpu|cuda|cuda-emulated]")
		fmt.Fprintln(stderr, "\nOne forward pass over the ids; prints {\"model\", \"dtype\", \"ids\", \"vocab_size\", \"positions\": [...]}")
		fmt.Fprintln(stderr, "where each position has its \"logits\" (or \"top\" with --top), \"max\" and \"argmax\".")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if err := mf.check("logits"); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ids, err := parseIDs(*idList)
	if err != nil {
		fmt.Fprintf(stderr, "student logits: --ids: %v\n", err)
		return 2
	}
	if *top < 0 {
		fmt.Fprintln(stderr, "student logits: --top must be >= 0")
		return 2
	}
	if _, err := qwen2.ParseWeightType(mf.dtype); err != nil {
		fmt.Fprintf(stderr, "student logits: %v\n", err)
		return 2
	}
	if _, err := student.ParseBackend(mf.backend); err != nil {
		fmt.Fprintf(stderr, "student logits: --%v\n", err)
		return 2
	}
	m, err := student.LoadModel(mf.dir, mf.options())
	if err != nil {
		fmt.Fprintf(stderr, "student logits: %v\n", err)
		return 1
	}
	defer m.Close()
	V := m.VocabSize()
	for i, id := range ids {
		if id >= V {
			fmt.Fprintf(stderr, "student logits: --ids: id %d (position %d) outside the vocabulary of %d\n", id, i, V)
			return 2
		}
	}
	c, err := m.NewCache(len(ids))
	if err != nil {
		fmt.Fprintf(stderr, "student logits: %v\n", err)
		return 1
	}
	defer c.Release()
	steps := []lm.Step{{Cache: c, Tokens: ids, AllLogits: true}}
	if err := m.Forward(ctx, steps); err != nil {
		fmt.Fprintf(stderr, "student logits: %v\n", err)
		return 1
	}
	w := bufio.NewWriterSize(stdout, 1<<20)
	writeLogits(w, mf.dir, m.WeightDType().String(), ids, V, steps[0].Logits, *top)
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "student logits: writing: %v\n", err)
		return 1
	}
	return 0
}

func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no ids given")
	}
	var ids []int
	for i, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("item %d %q is not a token id", i, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// writeLogits writes the JSON document by hand: a full dump is positions × vocab floats (1.2M for
// 8 positions of Qwen2), and the shortest float32 formatting keeps every value exact.
func writeLogits(w *bufio.Writer, dir, dtype string, ids []int, V int, logits []float32, top int) {
	var buf []byte
	num := func(v float32) {
		switch {
		case math.IsNaN(float64(v)) || math.IsInf(float64(v), 0):
			buf = append(buf, "null"...)
		default:
			buf = strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
		}
	}
	buf = append(buf, `{"model":`...)
	buf = strconv.AppendQuote(buf, dir)
	buf = append(buf, `,"dtype":`...)
	buf = strconv.AppendQuote(buf, dtype)
	buf = append(buf, `,"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, `],"vocab_size":`...)
	buf = strconv.AppendInt(buf, int64(V), 10)
	buf = append(buf, `,"positions":[`...)
	order := make([]int, V)
	for p := range ids {
		row := logits[p*V : (p+1)*V]
		if p > 0 {
			buf = append(buf, ',')
		}
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		buf = append(buf, `{"pos":`...)
		buf = strconv.AppendInt(buf, int64(p), 10)
		buf = append(buf, `,"argmax":`...)
		buf = strconv.AppendInt(buf, int64(best), 10)
		buf = append(buf, `,"max":`...)
		num(row[best])
		if top > 0 {
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
			buf = append(buf, `,"top":[`...)
			for k, id := range order[:min(top, V)] {
				if k > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, '[')
				buf = strconv.AppendInt(buf, int64(id), 10)
				buf = append(buf, ',')
				num(row[id])
				buf = append(buf, ']')
			}
			buf = append(buf, ']')
		} else {
			buf = append(buf, `,"logits":[`...)
			for i, v := range row {
				if i > 0 {
					buf = append(buf, ',')
				}
				num(v)
				if len(buf) > 1<<16 {
					w.Write(buf)
					buf = buf[:0]
				}
			}
			buf = append(buf, ']')
		}
		buf = append(buf, '}')
		w.Write(buf)
		buf = buf[:0]
	}
	buf = append(buf, "]}\n"...)
	w.Write(buf)
}
