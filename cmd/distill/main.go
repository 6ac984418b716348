// Command distill runs teachers (or the built-in oracle) over benchmark tasks with the
// chained-sql/v1 protocol and writes a resumable run dir (see docs/DESIGN.md).
//
//	distill --teachers gpt-oss,deepseek,glm,qwen --tasks bird:PATH/dev.json --dialects sqlite,postgres --out runs/NAME
//	distill load --tasks SPEC --dialect postgres|mysql --dsn DSN
//	distill env serve --tasks SPEC [--dialects ...] [--addr 127.0.0.1:8090]
//
// With no flags it runs the bundled sample on SQLite with the oracle policy into runs/demo, which
// needs no keys. Re-running the same command resumes; Ctrl-C stops after the episodes in flight
// (a second Ctrl-C abandons them); the exit status is 130 after an interruption.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/teachers"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitInterrupted is the status after Ctrl-C (128 + SIGINT).
const exitInterrupted = 130

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "env" {
		return runEnv(args[1:], stderr)
	}
	fs := flag.NewFlagSet("distill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := addDBFlags(fs)
	var (
		teacherList = fs.String("teachers", distill.OracleName, "comma-separated policies: oracle, teacher names from the config (gpt-oss, deepseek, glm, qwen, ...), teacher:NAME, student:DIR")
		taskSpec    = fs.String("tasks", "sample", "tasks: sample, bird:PATH, minidev:PATH, spider:PATH")
		dialectList = fs.String("dialects", "sqlite", "comma-separated dialects: sqlite, postgres, mysql")
		samples     = fs.Int("samples", 1, "trajectories per (task, teacher, dialect)")
		maxTurns    = fs.Int("max-turns", distill.DefaultMaxTurns, "turn budget per episode")
		out         = fs.String("out", "runs/demo", "run dir (created, or resumed when it exists)")
		configPath  = fs.String("config", "", "teachers config file (YAML); see teachers/example.yaml")
		limit       = fs.Int("limit", 0, "use only the first N tasks (0 = all)")
		shardSpec   = fs.String("shard", "", "run only part I/N of the keys (e.g. 0/4), for several machines")
		concurrency = fs.Int("concurrency", 0, "episodes in flight per teacher (0 = the teacher's max_concurrency)")
		retryFailed = fs.Bool("retry-failed", false, "retry keys that failed terminally in an earlier invocation")
		temperature = fs.Float64("temperature", -1, "sampling temperature for every teacher (-1 = the teacher's config)")
		maxTokens   = fs.Int("max-tokens", 0, "completion token limit per turn (0 = the teacher's config)")
		execTimeout = fs.Duration("exec-timeout", distill.DefaultExecTimeout, "timeout of each SQL statement")
		obsRows     = fs.Int("obs-rows", distill.DefaultObsRows, "rows shown in an observation")
		obsCell     = fs.Int("obs-cell", distill.DefaultObsCellChars, "widest cell shown in an observation (characters)")
		ordered     = fs.Bool("ordered", false, "judge ordered results when the gold SQL has ORDER BY (Spider style)")
		drain       = fs.Duration("drain-timeout", distill.DefaultDrainTimeout, "after Ctrl-C, how long in-flight episodes may finish")
		progress    = fs.String("progress", "auto", "progress output: auto, live, log, off")
		shardMB     = fs.Int("shard-mb", distill.DefaultMaxShardBytes>>20, "rotate shard files at this size (MiB)")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: distill [flags]\n       distill load --tasks SPEC --dialect postgres|mysql --dsn DSN\n       distill env serve --tasks SPEC [--dialects ...] [DSN flags] [--addr 127.0.0.1:8090]\n\nReal teachers: set CHAINEDSQL_BASE_URL and CHAINEDSQL_API_KEY (one OpenAI-compatible\nendpoint for all presets), or write a config file (teachers/example.yaml) and pass --config.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "distill: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "distill: %v\n", err)
		return 1
	}

	live, logw := false, io.Writer(stderr)
	switch *progress {
	case "auto":
		live = isTerminal(stderr)
	case "live":
		live = true
	case "log":
	case "off":
		logw = nil
	default:
		return fail(fmt.Errorf("--progress %q: want auto, live, log or off", *progress))
	}

	shard, err := distill.ParseShard(*shardSpec)
	if err != nil {
		return fail(err)
	}
	dialects, err := parseDialects(*dialectList)
	if err != nil {
		return fail(err)
	}
	var tcfg *teachers.Config
	if needsTeachers(*teacherList) || *configPath != "" {
		tcfg, err = teachers.LoadConfig(*configPath)
		if err != nil {
			return fail(err)
		}
	}
	popts := policies.Options{Teachers: tcfg}
	if strings.Contains(*teacherList, "student:") {
		// student:DIR takes what its spec cannot carry from the documented environment.
		if popts.Student, err = policies.StudentEnv(os.Getenv); err != nil {
			return fail(err)
		}
	}
	handles, err := policies.ResolveList(*teacherList, popts)
	if err != nil {
		return fail(err)
	}
	tasks, err := datasets.LoadTasks(*taskSpec, *db.root)
	if err != nil {
		return fail(fmt.Errorf("tasks %s: %w", *taskSpec, err))
	}
	if *limit < 0 {
		return fail(fmt.Errorf("--limit %d is negative", *limit))
	}
	if *limit > 0 && *limit < len(tasks) {
		tasks = tasks[:*limit]
	}
	conn, err := db.connect(context.Background(), tasks, dialects, stderr, "distill")
	if err != nil {
		return fail(err)
	}
	defer conn.Close()

	var chatOpts chat.Options
	if *temperature >= 0 {
		chatOpts.Temperature = chat.Float(*temperature)
	}
	chatOpts.MaxTokens = *maxTokens

	stop, abort, release := signals(stderr)
	defer release()

	start := time.Now()
	res, err := distill.Run(stop, distill.RunConfig{
		Dir:      *out,
		Tasks:    tasks,
		TaskSpec: *taskSpec,
		Limit:    *limit,
		Policies: handles,
		Dialects: dialects,
		Samples:  *samples,
		Episode: distill.EpisodeOptions{
			MaxTurns:    *maxTurns,
			ExecTimeout: *execTimeout,
			Caps:        distill.ObsCaps{MaxRows: *obsRows, MaxCellChars: *obsCell},
			Chat:        chatOpts,
			Ordered:     *ordered,
		},
		Concurrency:   *concurrency,
		Shard:         shard,
		Opener:        conn,
		RetryFailed:   *retryFailed,
		Toolkit:       buildinfo.Version(),
		MaxShardBytes: int64(*shardMB) << 20,
		DrainTimeout:  *drain,
		Abort:         abort,
		Progress:      logw,
		Interactive:   live,
	})
	if res != nil {
		for _, r := range res.Repairs {
			fmt.Fprintf(stderr, "distill: resume: %s\n", r)
		}
	}
	if err != nil && !errors.Is(err, distill.ErrInterrupted) {
		return fail(err)
	}
	if res != nil {
		fmt.Fprintf(stdout, "run dir %s: %d keys, %d done earlier, %d done now, %d failed now, %d abandoned, %s\n",
			*out, res.Total, res.Skipped, res.Done, res.Failed, res.Abandoned, time.Since(start).Round(time.Millisecond))
		if len(res.Summary) > 0 {
			distill.WriteSummary(stdout, res.Summary)
		}
	}
	if errors.Is(err, distill.ErrInterrupted) {
		fmt.Fprintf(stderr, "distill: %v\n", err)
		return exitInterrupted
	}
	return 0
}

// envOr returns the environment variable key, or def when it is empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// needsTeachers reports whether any spec of list may name a configured teacher.
func needsTeachers(list string) bool {
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" || s == distill.OracleName {
			continue
		}
		if p, _, ok := strings.Cut(s, ":"); ok && p != "teacher" {
			continue
		}
		return true
	}
	return false
}

func parseDialects(list string) ([]datasets.Dialect, error) {
	var out []datasets.Dialect
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(strings.ToLower(s))
		if s == "" {
			continue
		}
		switch d := datasets.Dialect(s); d {
		case datasets.SQLite, datasets.Postgres, datasets.MySQL:
			out = append(out, d)
		default:
			return nil, fmt.Errorf("--dialects: unknown dialect %q (want sqlite, postgres, mysql)", s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--dialects %q names no dialect", list)
	}
	return out, nil
}

// signals returns a context that ends on the first SIGINT/SIGTERM (stop feeding, drain) and one
// that ends on the second (abandon in-flight episodes).
func signals(stderr io.Writer) (stop, abort context.Context, release func()) {
	stop, cancelStop := context.WithCancel(context.Background())
	abort, cancelAbort := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-ch:
				n++
				if n == 1 {
					cancelStop()
				} else {
					fmt.Fprintln(stderr, "distill: abandoning the episodes in flight")
					cancelAbort()
				}
			case <-done:
				return
			}
		}
	}()
	return stop, abort, func() {
		signal.Stop(ch)
		close(done)
		cancelStop()
		cancelAbort()
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
