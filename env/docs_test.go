package env

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the client embedded in docs/ENV.md from docs/env_client.py")

// embedded matches docs/ENV.md's `<!-- embed: env_client.py -->` marker and the block after it.
var embedded = regexp.MustCompile("(?s)<!-- embed: env_client.py -->\n```python\n(.*?)```\n")

// TestDocEmbedsClient: docs/ENV.md shows docs/env_client.py exactly as it is, so the client a
// reader copies is the one CI runs. With -update the page is rewritten from the file.
func TestDocEmbedsClient(t *testing.T) {
	page := filepath.Join("..", "docs", "ENV.md")
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	client, err := os.ReadFile(filepath.Join("..", "docs", "env_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := embedded.FindAllSubmatchIndex(doc, -1)
	if len(m) != 1 {
		t.Fatalf("%s embeds env_client.py %d times, want once", page, len(m))
	}
	if got := doc[m[0][2]:m[0][3]]; !bytes.Equal(got, client) {
		if !*updateDocs {
			t.Fatalf("%s: the copy of env_client.py differs from the file (go test ./env -run TestDocEmbedsClient -update rewrites it)", page)
		}
		out := append(append(append([]byte{}, doc[:m[0][2]]...), client...), doc[m[0][3]:]...)
		if err := os.WriteFile(page, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
