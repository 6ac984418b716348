package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/env"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// createEpisode is POST /v1/episodes of task on url with key, as a trainer sends it.
func createEpisode(t *testing.T, url, key, task string) (msgs []chat.Message, text string, ids []int) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"task_id": task})
	req, err := http.NewRequest("POST", url+"/v1/episodes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ep struct {
		Messages []chat.Message `json:"messages"`
		Tokens   struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ep); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/episodes %s: %d %v", task, resp.StatusCode, err)
	}
	return ep.Messages, ep.Tokens.Text, ep.Tokens.IDs
}

// asyncReport is what docs/env_client_async.py prints.
type asyncReport struct {
	Subsets struct {
		ValFraction float64  `json:"val_fraction"`
		Seed        int64    `json:"seed"`
		Total       int      `json:"total"`
		Val         []string `json:"val"`
		ValListed   []string `json:"val_listed"`
		Mismatched  []string `json:"mismatched"`
	} `json:"subsets"`
	Episodes []struct {
		Roles       []string           `json:"roles"`
		Done        bool               `json:"done"`
		Rewards     map[string]float64 `json:"rewards"`
		FinalReward *float64           `json:"final_reward"`
		TurnRewards []float64          `json:"turn_rewards"`
	} `json:"episodes"`
	Batch []struct {
		Format *float64 `json:"format"`
		Error  *struct {
			Status int `json:"status"`
		} `json:"error"`
	} `json:"batch"`
	Score   []map[string]float64 `json:"score"`
	Unknown *struct {
		Status int `json:"status"`
	} `json:"unknown"`
}

// TestEnvPromptsAndAsyncClient runs the built `distill env prompts` on the sample and `distill
// env serve` with the same tasks, tokenizer, subsets and an API key. Each row of the Parquet
// file read back equals, message for message and token for token, the prompt POST
// /v1/episodes returns for its task, and carries the subset the listing gives it. Then the
// asyncio client of docs/ENV.md (Debian's python3) plays 16 episodes at once against the
// server, sending the key from $CHAINEDSQL_API_KEY, and checks the listing's subsets against
// its own Python computation of the assignment.
func TestEnvPromptsAndAsyncClient(t *testing.T) {
	tokPath := shared.Path(t, "tokenizer/qwen2.5")
	root := t.TempDir()
	tasks, err := datasets.LoadTasks("sample", root)
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, ".")
	out := filepath.Join(t.TempDir(), "prompts.parquet")
	common := []string{"--tasks", "sample", "--db-root", root, "--tokenizer", tokPath, "--val-fraction", "0.3", "--seed", "5"}
	code, _, stderr := testbin.Run(t, exec.Command(bin, append([]string{"env", "prompts", "--out", out}, common...)...))
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf(": %d prompts (", len(tasks))) {
		t.Fatalf("distill env prompts: exit %d\n%s", code, stderr)
	}
	rows, err := env.ReadPrompts(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tasks) {
		t.Fatalf("%d rows, want %d", len(rows), len(tasks))
	}
	const key = "i28-prompts-key"
	srv := startEnv(t, bin, append([]string{"--api-key", key}, common...)...)
	sub := datasets.Subsets{ValFraction: 0.3, Seed: 5}
	val := 0
	for i, row := range rows {
		task := tasks[i]
		if row.TaskID != task.ID || row.DBID != task.DBID || row.Dialect != "sqlite" || row.Split != "sample" || row.Subset != sub.Of(task.ID) {
			t.Fatalf("row %d: %s %s %s %s %s for task %s", i, row.TaskID, row.DBID, row.Dialect, row.Split, row.Subset, task.ID)
		}
		if row.Subset == datasets.SubsetVal {
			val++
		}
		msgs, text, ids := createEpisode(t, srv.url, key, task.ID)
		got := make([]chat.Message, len(row.Prompt))
		for j, m := range row.Prompt {
			got[j] = chat.Message{Role: m.Role, Content: m.Content}
		}
		if !slices.Equal(got, msgs) || row.PromptText != text {
			t.Fatalf("%s: the exported prompt differs from the episode's", task.ID)
		}
		if int(row.PromptTokens) != len(ids) || len(ids) < 100 || !slices.EqualFunc(row.PromptIDs, ids, func(a int32, b int) bool { return int(a) == b }) {
			t.Fatalf("%s: %d exported prompt tokens, the episode's %d, or their ids differ", task.ID, row.PromptTokens, len(ids))
		}
	}
	if val == 0 || val == len(rows) {
		t.Errorf("%d of %d tasks in val at fraction 0.3", val, len(rows))
	}

	py := python3(t)
	task := tasks[3]
	gold, _ := task.GoldFor(datasets.SQLite)
	// -B: importing env_client.py writes no __pycache__ into docs/.
	cmd := exec.Command(py, "-B", filepath.Join("..", "..", "docs", "env_client_async.py"), srv.url, task.ID, gold)
	cmd.Env = append(os.Environ(), "CHAINEDSQL_API_KEY="+key)
	code, stdout, stderr := testbin.Run(t, cmd)
	var rep asyncReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("async client exit %d, output not JSON (%v):\n%s\n%s", code, err, stdout, stderr)
	}
	if code != 0 {
		t.Errorf("async client exit %d (its own checks failed):\n%s\n%s", code, stdout, stderr)
	}
	var wantVal []string
	for _, row := range rows {
		if row.Subset == datasets.SubsetVal {
			wantVal = append(wantVal, row.TaskID)
		}
	}
	s := rep.Subsets
	if s.ValFraction != 0.3 || s.Seed != 5 || s.Total != len(tasks) || len(s.Mismatched) != 0 || !slices.Equal(s.Val, wantVal) || !slices.Equal(s.ValListed, wantVal) {
		t.Errorf("subsets: %+v, want val %v", s, wantVal)
	}
	if len(rep.Episodes) != 16 {
		t.Fatalf("%d episodes", len(rep.Episodes))
	}
	for i, e := range rep.Episodes {
		if !e.Done || e.FinalReward == nil || *e.FinalReward != 1 || e.Rewards["correct"] != 1 || strings.Join(e.Roles, ",") != "system,user,assistant,user,assistant" {
			t.Errorf("episode %d: %+v", i, e)
		}
	}
	if len(rep.Batch) != 2 || rep.Batch[0].Format == nil || *rep.Batch[0].Format != 0 || rep.Batch[1].Error == nil || rep.Batch[1].Error.Status != 404 {
		t.Errorf("batch: %+v", rep.Batch)
	}
	if len(rep.Score) != 1 || rep.Score[0]["correct"] != 1 || rep.Unknown == nil || rep.Unknown.Status != 404 {
		t.Errorf("score %+v, unknown episode %+v", rep.Score, rep.Unknown)
	}
	srv.stop(t)
}
