package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/oaitest"
)

var update = flag.Bool("update", false, "rewrite the embedded copies in docs/SCALE-OUT.md from docs/examples")

// embed matches a `<!-- embed: PATH -->` marker and the fenced block after it.
var embed = regexp.MustCompile("(?s)<!-- embed: (\\S+) -->\n(```[a-z]*\n)(.*?)```\n")

// TestScaleOutEmbedsExamples: docs/SCALE-OUT.md shows every file of docs/examples exactly as it
// is, so the templates users copy are the ones scripts/slurm-e2e.sh submits. With -update the
// page is rewritten from the files.
func TestScaleOutEmbedsExamples(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	page := filepath.Join(docs, "SCALE-OUT.md")
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := embed.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := embed.FindSubmatch(m)
		name := string(sub[1])
		seen[name]++
		file, err := os.ReadFile(filepath.Join(docs, name))
		if err != nil {
			t.Errorf("%s embeds %s: %v", page, name, err)
			return m
		}
		if !bytes.Equal(sub[3], file) {
			if !*update {
				t.Errorf("%s: the copy of %s differs from the file (go test ./internal/e2etool -run TestScaleOutEmbedsExamples -update rewrites it)", page, name)
			}
			return append(append(append([]byte("<!-- embed: "+name+" -->\n"), sub[2]...), file...), "```\n"...)
		}
		return m
	})
	files, err := filepath.Glob(filepath.Join(docs, "examples", "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		name := filepath.ToSlash(strings.TrimPrefix(f, docs+string(filepath.Separator)))
		if seen[name] != 1 {
			t.Errorf("%s embeds %s %d times, want once", page, name, seen[name])
		}
	}
	if *update && !bytes.Equal(out, data) {
		if err := os.WriteFile(page, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExplore: the scripted teacher counts the first table's rows, looks at three rows, then
// repeats that statement (the loop's convergence), whatever the table's quoting.
func TestExplore(t *testing.T) {
	script := explore(0)
	sys := oaitest.Message{Role: "system", Content: "Schema:\n\nCREATE TABLE \"member\" (\n  id INTEGER\n);\n\nCREATE TABLE loan (\n"}
	user := oaitest.Message{Role: "user", Content: "How many members?"}
	msgs := []oaitest.Message{sys, user}
	var got []string
	for turn := range 3 {
		r := script(oaitest.Request{Messages: msgs})
		if !strings.Contains(r.ReasoningContent, "turn") {
			t.Errorf("turn %d: no reasoning_content: %+v", turn, r)
		}
		got = append(got, r.Content)
		msgs = append(msgs, oaitest.Message{Role: "assistant", Content: r.Content}, oaitest.Message{Role: "user", Content: "<observation>…</observation>"})
	}
	want := []string{
		"<think>Count the rows of \"member\" first.</think>\n<sql>SELECT COUNT(*) FROM \"member\"</sql>",
		"<think>Look at a few rows of \"member\".</think>\n<sql>SELECT * FROM \"member\" LIMIT 3</sql>",
		"<think>Look at a few rows of \"member\".</think>\n<sql>SELECT * FROM \"member\" LIMIT 3</sql>",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("turn %d: %q, want %q", i, got[i], want[i])
		}
	}
	if r := script(oaitest.Request{Messages: []oaitest.Message{{Role: "system", Content: "no schema"}, user}}); !strings.Contains(r.Content, "<sql>SELECT 1</sql>") {
		t.Errorf("no table: %q", r.Content)
	}
}
