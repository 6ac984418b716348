package env

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/rewards"
)

// TestRepliesAsDocumented plays the replies docs/ENV.md ("How a reply is read") describes, each
// as the first turn of its own episode with --format-penalty 0.05, and checks the outcome, the
// statement run, format, malformed_turns and total; that a truncated turn, a format violation
// or a refused statement between two equal statements keeps them from converging; and that a
// finish_reason outside stop, length and content_filter is 400 for a step and a batch step,
// leaving the episode as it was.
func TestRepliesAsDocumented(t *testing.T) {
	w := rewards.DefaultWeights
	w.FormatPenalty = 0.05
	_, url := testServer(t, Config{Weights: &w})
	task := tasksOf(t)[3]
	g := gold(t, task, datasets.SQLite)
	long := strings.Repeat("reasoning ", textcap.EnvReply/10+100) // longer than an episode keeps
	type result struct {
		Info    wireInfo       `json:"info"`
		Rewards map[string]any `json:"rewards"`
	}
	for _, c := range []struct {
		name, content, reasoning, finish string
		outcome, sql                     string
		format, malformed                float64
	}{
		{"upper-case tags", "<THINK>x</THINK>\n<SQL>" + g + "</SQL>", "", "", "ok", g, 1, 0},
		{"mixed-case tags", "<Think>x</think><sql>" + g + "</Sql>", "", "", "ok", g, 1, 0},
		{"a Markdown fence in <sql>", "<think>x</think>\n<sql>\n```sql\n" + g + "\n```\n</sql>", "", "", "ok", g, 1, 0},
		{"an empty think block", "<think></think><sql>" + g + "</sql>", "", "", "ok", g, 1, 0},
		{"a spaced tag", "< think>x</think><sql>" + g + "</sql>", "", "", "ok", g, 0, 1},
		{"no think block", "<sql>" + g + "</sql>", "", "", "ok", g, 0, 1},
		{"the reasoning field", "<sql>" + g + "</sql>", "x", "", "ok", g, 1, 0},
		{"the reasoning field and a think block", "<think>y</think><sql>" + g + "</sql>", "x", "", "ok", g, 0, 1},
		{"prose after the blocks", answer(g) + "\nDone.", "", "", "ok", g, 0, 1},
		{"two sql blocks: the last runs", "<think>x</think><sql>SELECT 1</sql><sql>" + g + "</sql>", "", "", "ok", g, 0, 1},
		{"an unclosed sql block, stopped", "<think>x</think><sql>" + g, "", "stop", "ok", g, 0, 1},
		{"an unclosed sql block, cut", "<think>x</think><sql>" + g, "", "length", "truncated", "", 0, 1},
		{"an unclosed sql block, filtered", "<think>x</think><sql>" + g, "", "content_filter", "truncated", "", 0, 1},
		{"cut while reasoning", "<think>x", "", "length", "truncated", "", 0, 1},
		{"a whole reply, length", answer(g), "", "length", "ok", g, 1, 0},
		{"no sql block", "<think>x</think>", "", "", "format_violation", "", 0, 1},
		{"a draft in the think block", "<think>maybe <sql>SELECT 1</sql></think><sql>" + g + "</sql>", "", "", "ok", g, 0, 1},
		{"only a draft", "<think>maybe <sql>SELECT 1</sql></think>", "", "", "format_violation", "", 0, 1},
		{"a think block never closed", "<think>x<sql>" + g + "</sql>", "", "", "ok", g, 0, 1},
		{"a leading sql block", "<sql>SELECT '</think>' AS x</sql>", "", "", "ok", "SELECT '</think>' AS x", 0, 1},
		{"filtered while reasoning", "<think>x", "", "content_filter", "format_violation", "", 0, 1},
		{"prose to the limit", "I would count them", "", "length", "format_violation", "", 0, 1},
		{"an empty reply to the limit", "", "", "length", "truncated", "", 0, 1},
		{"reasoning field to the limit", "", "x", "length", "truncated", "", 0, 1},
		// Past what an episode keeps of a text (textcap.EnvReply): the form is the whole reply's.
		{"a long think block", "<think>" + long + "</think>\n<sql>" + g + "</sql>", "", "", "ok", g, 1, 0},
		{"a long think block and prose after", "<think>" + long + "</think>\n<sql>" + g + "</sql> Done.", "", "", "ok", g, 0, 1},
		{"a long reasoning field", "<sql>" + g + "</sql>", long, "", "ok", g, 1, 0},
		{"a long reasoning field with a tag past the cut", "<sql>" + g + "</sql>", long + "<sql>SELECT 1</sql>", "", "ok", g, 0, 1},
	} {
		ep := start(t, url, task.ID, "")
		body := map[string]string{"content": c.content}
		if c.reasoning != "" {
			body["reasoning"] = c.reasoning
		}
		if c.finish != "" {
			body["finish_reason"] = c.finish
		}
		var r result
		if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", body, &r); code != 200 {
			t.Fatalf("%s: %d", c.name, code)
		}
		wantTotal := 0.1*c.format + 0.1*float64(b2f(c.outcome == "ok")) - 0.05*c.malformed
		if r.Info.Outcome != c.outcome || r.Info.SQL != c.sql || r.Rewards["format"] != c.format ||
			r.Rewards["malformed_turns"] != c.malformed || r.Rewards["total"] != wantTotal {
			t.Errorf("%s: outcome %s, sql %q, rewards %v; want %s, %q, format %v, malformed %v, total %v",
				c.name, r.Info.Outcome, r.Info.SQL, r.Rewards, c.outcome, c.sql, c.format, c.malformed, wantTotal)
		}
		// /v1/score reads the same reply object the same way.
		var sc struct{ Results []result }
		if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": []any{body}}, &sc); code != 200 || len(sc.Results) != 1 {
			t.Fatalf("%s: score %d", c.name, code)
		}
		if o := sc.Results[0]; o.Info.Outcome != c.outcome || o.Info.SQL != c.sql || o.Rewards["format"] != c.format || o.Rewards["malformed_turns"] != c.malformed {
			t.Errorf("%s: scored: outcome %s, sql %q, rewards %v; want %s, %q, format %v, malformed %v", c.name, o.Info.Outcome, o.Info.SQL, o.Rewards, c.outcome, c.sql, c.format, c.malformed)
		}
	}
	var e wireErr
	if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": []any{answer(g), map[string]string{"content": answer(g), "finish_reason": "abort"}}}, &e); code != 400 ||
		!strings.Contains(e.Error.Message, "completion 1") {
		t.Errorf("a completion's unknown finish_reason: %d %+v", code, e.Error)
	}
	for _, bad := range []any{map[string]string{"text": "x"}, nil, 7, []string{"x"}} {
		if code := call(t, "POST", url+"/v1/score", map[string]any{"task_id": task.ID, "completions": []any{bad}}, &e); code != 400 || !strings.Contains(e.Error.Message, "a completion is a string or") {
			t.Errorf("completion %v: %d %+v", bad, code, e.Error)
		}
	}

	// Convergence: the same statement in consecutive turns; a truncated turn, a format violation
	// or a refused over-long statement between two starts it over.
	for _, between := range []map[string]string{
		{"content": "<think>x</think><sql>" + g, "finish_reason": "length"},
		{"content": "<think>x</think>"},
		{"content": answer("SELECT 1 -- " + strings.Repeat("x", 70_000))},
	} {
		ep := start(t, url, task.ID, "")
		step(t, url, ep.EpisodeID, answer(g))
		if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", between, nil); code != 200 {
			t.Fatalf("%.40s: %d", between["content"], code)
		}
		if s := step(t, url, ep.EpisodeID, answer(g)); *s.Done {
			t.Errorf("%.40s between two golds: converged", between["content"])
		}
		if s := step(t, url, ep.EpisodeID, answer(g)); !*s.Done || s.Rewards.four(t)[2] != 1 {
			t.Errorf("%.40s, then the gold twice: not converged", between["content"])
		}
	}

	ep := start(t, url, task.ID, "")
	for _, fr := range []string{"lenght", "abort", "STOP", "tool_calls"} {
		var e wireErr
		if code := call(t, "POST", url+"/v1/episodes/"+ep.EpisodeID+"/step", map[string]string{"content": answer(g), "finish_reason": fr}, &e); code != 400 ||
			!strings.Contains(e.Error.Message, `"finish_reason" "`+fr+`"`) || !strings.Contains(e.Error.Message, `"length"`) {
			t.Errorf("finish_reason %q: %d %+v", fr, code, e.Error)
		}
		body := map[string]any{"steps": []map[string]string{{"episode_id": ep.EpisodeID, "content": answer(g), "finish_reason": fr}}}
		if code := call(t, "POST", url+"/v1/episodes:batch-step", body, &e); code != 400 || !strings.HasPrefix(e.Error.Message, `steps[0]: "finish_reason"`) {
			t.Errorf("batch finish_reason %q: %d %+v", fr, code, e.Error)
		}
	}
	if s := step(t, url, ep.EpisodeID, answer(g)); s.Turn != 1 {
		t.Errorf("after the refused steps the episode is at turn %d, want 1", s.Turn)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
