package env

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the clients embedded in docs/ENV.md from docs/env_client.py and docs/env_client_async.py")

// TestDocEmbedsClient: docs/ENV.md shows docs/env_client.py and docs/env_client_async.py
// exactly as they are, so the clients a reader copies are the ones CI runs. With -update the
// page is rewritten from the files.
func TestDocEmbedsClient(t *testing.T) {
	page := filepath.Join("..", "docs", "ENV.md")
	for _, name := range []string{"env_client.py", "env_client_async.py"} {
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		client, err := os.ReadFile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		// The `<!-- embed: NAME -->` marker and the block after it.
		embedded := regexp.MustCompile("(?s)<!-- embed: " + regexp.QuoteMeta(name) + " -->\n```python\n(.*?)```\n")
		m := embedded.FindAllSubmatchIndex(doc, -1)
		if len(m) != 1 {
			t.Fatalf("%s embeds %s %d times, want once", page, name, len(m))
		}
		if got := doc[m[0][2]:m[0][3]]; !bytes.Equal(got, client) {
			if !*updateDocs {
				t.Fatalf("%s: the copy of %s differs from the file (go test ./env -run TestDocEmbedsClient -update rewrites it)", page, name)
			}
			out := append(append(append([]byte{}, doc[:m[0][2]]...), client...), doc[m[0][3]:]...)
			if err := os.WriteFile(page, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
