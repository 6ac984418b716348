package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/inference/lm"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
)

var logitsCmd = &cli.Command{
	Name:    "logits",
	Summary: "print the logits of every position for given token ids as JSON (parity checks)",
	Help: `One forward pass over the ids; prints {"model", "dtype", "kv_cache", "ids", "vocab_size",
"positions": [...]} where each position has its "logits" (or "top" with --top), "max" and
"argmax"; kv_cache is the KV cache's value type the logits were computed over (--kv; bf16 on the
cuda backends).`,
	Setup: setupLogits,
}

func setupLogits(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	idList := fs.String("ids", "", "comma-separated token ids, e.g. 151644,872,198 (required)")
	top := fs.Int("top", 0, "print only the N largest logits of each position as [id, logit] pairs (0: all)")
	return func(ctx context.Context, c *cli.Call) error {
		if err := mf.check(); err != nil {
			return err
		}
		_, kvBF16, err := mf.weightFlags.parse()
		if err != nil {
			return err
		}
		kv := "f32" // as LoadModel holds it: the CUDA backends' cache is bf16
		if b, _ := student.ParseBackend(mf.backend); kvBF16 || b != student.BackendCPU {
			kv = "bf16"
		}
		ids, err := parseIDs(*idList)
		if err != nil {
			return cli.Usagef("--ids: %v", err)
		}
		if *top < 0 {
			return cli.Usagef("--top must be >= 0")
		}
		m, err := student.LoadModel(mf.dir, mf.options())
		if err != nil {
			return err
		}
		defer m.Close()
		V := m.VocabSize()
		for i, id := range ids {
			if id >= V {
				return cli.Usagef("--ids: id %d (position %d) outside the vocabulary of %d", id, i, V)
			}
		}
		cache, err := m.NewCache(len(ids))
		if err != nil {
			return err
		}
		defer cache.Release()
		steps := []lm.Step{{Cache: cache, Tokens: ids, AllLogits: true}}
		if err := m.Forward(ctx, steps); err != nil {
			return err
		}
		w := bufio.NewWriterSize(c.Stdout, 1<<20)
		writeLogits(w, mf.dir, m.WeightDType().String(), kv, ids, V, steps[0].Logits, *top)
		if err := w.Flush(); err != nil {
			return fmt.Errorf("writing: %w", err)
		}
		return nil
	}
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
func writeLogits(w *bufio.Writer, dir, dtype, kv string, ids []int, V int, logits []float32, top int) {
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
	buf = append(buf, `,"kv_cache":`...)
	buf = strconv.AppendQuote(buf, kv)
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
