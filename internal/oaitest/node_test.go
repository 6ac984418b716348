package oaitest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOfficialNodeClient runs the official OpenAI Node client (scripts/check_oaitest_openai.mjs)
// against each personality, plain and streamed, and checks that it reads back what the script
// answered: the content, the reasoning in the personality's field, the finish reason and the
// usage. It skips unless node is on PATH and CHAINEDSQL_NODE_MODULES names a node_modules
// folder holding the npm package openai.
func TestOfficialNodeClient(t *testing.T) {
	mods := os.Getenv("CHAINEDSQL_NODE_MODULES")
	node, err := exec.LookPath("node")
	if mods == "" || err != nil {
		t.Skip("set CHAINEDSQL_NODE_MODULES to a node_modules folder with the npm package openai (and have node on PATH)")
	}
	if _, err := os.Stat(filepath.Join(mods, "openai")); err != nil {
		t.Skipf("no openai package in %s: %v", mods, err)
	}
	script, _ := filepath.Abs(filepath.Join("..", "..", "scripts", "check_oaitest_openai.mjs"))
	think, content := "Ünïcödé reasoning 🤔 over several chunks, to be reassembled.", "<sql>SELECT 'ß'</sql>"
	for name, p := range Personalities {
		if name == "dashscope" {
			p.Thinking = nil // its rule refuses the plain call; the shapes are those of reasoning_content
		}
		t.Run(name, func(t *testing.T) {
			srv := NewServer(t, func(Request) Response { return Response{Think: think, Content: content} },
				WithPersonality(p), WithModels("m"))
			cmd := exec.Command(node, script, srv.BaseURL(), "m")
			cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node: %v\n%s", err, stderr.String())
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			n := 0
			for sc.Scan() {
				n++
				var got struct {
					Mode, Finish     string
					Content          *string
					ReasoningContent *string `json:"reasoning_content"`
					Reasoning        *string
					Usage            map[string]any
					Chunks           int
				}
				if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
					t.Fatalf("%q: %v", sc.Text(), err)
				}
				wantContent := content
				switch p.ReasoningField {
				case FieldInline:
					wantContent = "<think>" + think + "</think>\n" + content
				case FieldOpened:
					wantContent = think + "</think>\n" + content
				}
				field := map[string]*string{FieldReasoningContent: got.ReasoningContent, "": got.ReasoningContent,
					FieldReasoning: got.Reasoning, FieldBoth: got.Reasoning, FieldDetails: got.Reasoning}[p.ReasoningField]
				if got.Content == nil || *got.Content != wantContent || got.Finish != "stop" || got.Usage == nil {
					t.Errorf("%s: %s", got.Mode, sc.Text())
				}
				if p.ReasoningField != FieldInline && p.ReasoningField != FieldOpened && (field == nil || *field != think) {
					t.Errorf("%s: reasoning not in %q: %s", got.Mode, p.ReasoningField, sc.Text())
				}
				if got.Mode == "stream" && got.Chunks < 5 {
					t.Errorf("stream of %d chunks", got.Chunks)
				}
			}
			if n != 2 {
				t.Fatalf("node printed %d results:\n%s\n%s", n, out, stderr.String())
			}
		})
	}
}
