// Command e2etool is test plumbing for the end-to-end scripts (scripts/slurm-e2e.sh); it is not
// shipped. It serves a scripted teacher and reads a curated dataset back row by row:
//
//	e2etool teacher --url-file FILE [--delay 100ms] [--personality NAME --models IDS] [--cut]
//	                                                  # serve until SIGTERM; FILE gets the base URL
//	e2etool rows DATASET_DIR                          # one JSON row per line, sorted by key
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/chainedsql/chainedsql/curate"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "e2etool:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: e2etool teacher --url-file FILE [--delay D] | e2etool rows DATASET_DIR")
	}
	switch args[0] {
	case "teacher":
		return serveTeacher(ctx, args[1:])
	case "rows":
		if len(args) != 2 {
			return errors.New("usage: e2etool rows DATASET_DIR")
		}
		return writeRows(ctx, args[1], stdout)
	}
	return fmt.Errorf("unknown command %q (want teacher or rows)", args[0])
}

// serveTeacher serves the oaitest fake with the explore script until ctx ends.
func serveTeacher(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("teacher", flag.ContinueOnError)
	urlFile := fs.String("url-file", "", "write the base URL (http://127.0.0.1:PORT/v1) to this file once listening")
	delay := fs.Duration("delay", 0, "wait this long before each reply (a teacher's latency)")
	personality := fs.String("personality", "", "speak this provider's wire shape (an oaitest.Personalities name); the reasoning goes where that provider puts it")
	models := fs.String("models", "scripted-teacher", "comma-separated model ids served (a strict personality refuses others)")
	cut := fs.Bool("cut", false, "cut the first turn of every other question inside its reasoning (content null, finish length)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *urlFile == "" || fs.NArg() > 0 {
		return errors.New("usage: e2etool teacher --url-file FILE [--delay D] [--personality NAME --models IDS] [--cut]")
	}
	opts := []oaitest.Option{oaitest.WithModels(strings.Split(*models, ",")...), oaitest.WithoutBodies()}
	script := explore(*delay)
	if *personality != "" {
		p, ok := oaitest.Personalities[*personality]
		if !ok {
			return fmt.Errorf("teacher: unknown personality %q", *personality)
		}
		opts = append(opts, oaitest.WithPersonality(p))
		script = exploreAs(script, *cut)
	}
	srv := oaitest.Start(script, opts...)
	defer srv.Close()
	// Written atomically, so a script polling for the file never reads half of it.
	if err := atomicfile.WriteFile(*urlFile, []byte(srv.BaseURL()+"\n"), 0o644); err != nil {
		return fmt.Errorf("teacher: %w", err)
	}
	<-ctx.Done()
	return nil
}

// firstTable finds the first table of the schema in the system prompt, as the DDL spells it
// (quoted names keep their quotes).
var firstTable = regexp.MustCompile(`CREATE TABLE ("[^"]+"|` + "`[^`]+`" + `|\w+)`)

// explore is a deterministic agentic teacher: it counts the rows of the schema's first table,
// then looks at three of them, and repeats that query, so the episode converges on turn 3. The
// reply depends only on the conversation, so any split of a run over processes gets the same
// trajectories. Each turn also carries reasoning_content, as DeepSeek and vLLM send it.
func explore(delay time.Duration) oaitest.Script {
	return func(r oaitest.Request) oaitest.Response {
		table := "1"
		if len(r.Messages) > 0 {
			if m := firstTable.FindStringSubmatch(r.Messages[0].Content); m != nil {
				table = m[1]
			}
		}
		think, sql := "Count the rows of "+table+" first.", "SELECT COUNT(*) FROM "+table
		if table == "1" {
			think, sql = "The schema names no table.", "SELECT 1"
		} else if r.Turn() > 0 {
			think, sql = "Look at a few rows of "+table+".", "SELECT * FROM "+table+" LIMIT 3"
		}
		return oaitest.Response{
			Content:          "<think>" + think + "</think>\n<sql>" + sql + "</sql>",
			ReasoningContent: fmt.Sprintf("turn %d: %s", r.Turn(), think),
			Delay:            delay,
		}
	}
}

// exploreAs turns explore's replies into abstract ones for a personality: the reasoning as
// Response.Think (the personality puts it in its field, or inline), the content only the <sql>
// block; with cut, the first turn of every question of even length is cut by the token limit
// inside its reasoning.
func exploreAs(base oaitest.Script, cut bool) oaitest.Script {
	return func(r oaitest.Request) oaitest.Response {
		resp := base(r)
		p := protocol.ParseReply(resp.Content)
		resp.Think, resp.ReasoningContent = resp.ReasoningContent+"\n"+p.Think, ""
		resp.Content = "<sql>" + p.SQL + "</sql>"
		if cut && r.Turn() == 0 && len(r.FirstUser())%2 == 0 {
			resp.Content, resp.FinishReason = "", "length"
		}
		return resp
	}
}

// writeRows prints the dataset's rows as JSON lines sorted by key, with source_run cleared (it
// names the run dir a row came from, which differs between a sharded and a single run).
func writeRows(ctx context.Context, dir string, w io.Writer) error {
	var rows []curate.Row
	err := curate.ReadRows(ctx, dir, func(r *curate.Row) error {
		row := *r
		row.SourceRun = ""
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return fmt.Errorf("rows %s: %w", filepath.Clean(dir), err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	enc := json.NewEncoder(w)
	for i := range rows {
		if err := enc.Encode(&rows[i]); err != nil {
			return fmt.Errorf("rows %s: %w", dir, err)
		}
	}
	return nil
}
