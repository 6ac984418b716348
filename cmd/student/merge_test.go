package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestEvalShardsAndMerge(t *testing.T) {
	dev := birdDir(t)
	root := t.TempDir()
	var parts []string
	for i := range 2 {
		dir := filepath.Join(root, fmt.Sprint("part", i))
		code, out, errs := run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--shard", fmt.Sprintf("%d/2", i), "--out", dir, "--progress", "off")
		if code != 0 {
			t.Fatalf("eval --shard %d/2: exit %d\n%s\n%s", i, code, out, errs)
		}
		parts = append(parts, dir)
	}
	merged := filepath.Join(root, "merged")
	code, out, errs := run(t, append(append([]string{"merge"}, parts...), "--out", merged)...) // flags after the arguments
	if code != 0 || !strings.Contains(out, "EX 100.00% (simple 100.00, moderate 100.00, challenging 100.00), convergence 100.0%") {
		t.Fatalf("merge: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, "score", "--predictions", filepath.Join(merged, "predict_dev.json"), "--tasks", "bird:"+dev)
	if code != 0 || !strings.HasPrefix(out, "EX 100.00% (simple 100.00, moderate 100.00, challenging 100.00)") {
		t.Fatalf("score of the merged predictions: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := run(t, "merge", "--out", filepath.Join(root, "m2"), parts[0]); code != 1 || !strings.Contains(errs, "parts 1/2 are missing") {
		t.Fatalf("merge of one part of two: exit %d, %s", code, errs)
	}
	if code, _, errs := run(t, "eval", "--policy", "oracle", "--tasks", "bird:"+dev, "--shard", "2/2", "--out", filepath.Join(root, "x")); code == 0 || !strings.Contains(errs, "shard") {
		t.Fatalf("--shard 2/2: exit %d, %s", code, errs)
	}
}
