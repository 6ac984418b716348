package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/distill/policies"
	"github.com/chainedsql/chainedsql/evaluate"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/teachers"
)

func init() {
	register("eval", "evaluate a policy (the student, a teacher, the oracle) on benchmark tasks", runEval)
}

// exitInterrupted is the status after Ctrl-C (128 + SIGINT); the eval dir resumes.
const exitInterrupted = 130

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model       = fs.String("model", "", "student model directory (same as --policy student:DIR)")
		policySpec  = fs.String("policy", "", "policy to evaluate: oracle, teacher:NAME (from --config), student:DIR")
		configPath  = fs.String("config", "", "teachers config file (YAML) for teacher:NAME")
		taskSpec    = fs.String("tasks", "", "tasks: bird:PATH/dev.json, minidev:PATH, spider:PATH, sample (required)")
		dbRoot      = fs.String("db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
		out         = fs.String("out", "", "eval dir (created, or resumed when it exists; default evals/POLICY)")
		maxTurns    = fs.Int("max-turns", distill.DefaultMaxTurns, "turn budget per task")
		limit       = fs.Int("limit", 0, "evaluate only the first N tasks (0 = all)")
		backend     = fs.String("backend", "cpu", "student runtime backend: cpu, cuda (NVIDIA GPU) or cuda-emulated (the CUDA kernels on the CPU; -tags cudaemu builds)")
		batch       = fs.Int("batch", 0, "conversations in flight, for student:DIR also the most decoded together (0 = the policy's own, else 16)")
		shardSpec   = fs.String("shard", "", "evaluate only part I/N of the tasks (e.g. 0/4, one per machine); join the parts with student merge")
		samples     = fs.Int("samples", 1, "trajectories per task (needs --temperature > 0 to differ)")
		temperature = fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
		vote        = fs.Bool("vote", false, "with --samples > 1: answer each task by majority over the samples' executed results")
		maxTokens   = fs.Int("max-tokens", 0, "completion token limit per turn (0 = the policy's default)")
		execTimeout = fs.Duration("exec-timeout", distill.DefaultExecTimeout, "timeout of each SQL statement")
		tokenizer   = fs.String("tokenizer", "", "student: tokenizer.json or its directory when the model directory has none")
		dtype       = fs.String("dtype", "", "student: weight type f32, bf16 or q8 (default: as stored)")
		threads     = fs.Int("threads", 0, "student: CPU threads for the kernels (default: all cores)")
		mmap        = fs.Bool("mmap", false, "student: use weights stored in the wanted type in place from the mapped file (shared page cache) instead of copying them into huge-page memory")
		cacheTokens = fs.Int("cache-tokens", 65536, "student: tokens of finished conversations' KV caches kept for prefix reuse (a shared schema prompt, the previous turn); negative: none, every prompt computed in full")
		progress    = fs.String("progress", "auto", "progress output: auto, live, log, off")
		dialect     = fs.String("dialect", "sqlite", "engine the tasks run on: sqlite, postgres (--pg-dsn) or mysql (--mysql-dsn)")
		pgDSN       = fs.String("pg-dsn", os.Getenv("CHAINEDSQL_PG_DSN"), "PostgreSQL DSN (databases loaded with distill load); default $CHAINEDSQL_PG_DSN")
		myDSN       = fs.String("mysql-dsn", os.Getenv("CHAINEDSQL_MYSQL_DSN"), "MySQL/MariaDB DSN in go-sql-driver form; default $CHAINEDSQL_MYSQL_DSN")
		reader      = fs.String("reader", readerDefault(), "role/user (made by distill load) the statements run as on the servers; the DSN's user only looks up its password; default $CHAINEDSQL_READER or "+datasets.DefaultReader)
		asDSNUser   = fs.Bool("exec-as-dsn-user", false, "run the statements as the DSN's own user instead of the reader: UNSAFE unless you made that user read-only yourself")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "student eval: %v\n", err)
		return 1
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	spec, err := evalPolicySpec(*model, *policySpec)
	if err != nil {
		return fail(err)
	}
	// A backend that cannot run here is one clear line before anything starts.
	if b, err := student.ParseBackend(*backend); err != nil {
		return fail(fmt.Errorf("--%w", err))
	} else if b != student.BackendCPU {
		if err := cuda.Check(b); err != nil {
			return fail(fmt.Errorf("--backend %s: %w", b, err))
		}
	}
	if *taskSpec == "" {
		return fail(errors.New("--tasks is required (bird:PATH/dev.json, minidev:PATH, spider:PATH or sample)"))
	}
	if *limit < 0 || *batch < 0 || *samples < 1 || *maxTurns < 1 || *temperature < 0 {
		return fail(fmt.Errorf("--limit %d, --batch %d, --samples %d, --max-turns %d, --temperature %g: out of range", *limit, *batch, *samples, *maxTurns, *temperature))
	}
	if *samples > 1 && *temperature == 0 {
		return fail(fmt.Errorf("--samples %d at --temperature 0 repeats one greedy answer; set --temperature > 0", *samples))
	}
	if *vote && *samples < 2 {
		return fail(errors.New("--vote needs --samples 2 or more"))
	}
	shard, err := distill.ParseShard(*shardSpec)
	if err != nil {
		return fail(fmt.Errorf("--shard: %w", err))
	}
	d := datasets.Dialect(strings.ToLower(*dialect))
	switch {
	case d == datasets.SQLite:
	case d == datasets.Postgres && *pgDSN == "":
		return fail(errors.New("--dialect postgres needs --pg-dsn (or $CHAINEDSQL_PG_DSN)"))
	case d == datasets.MySQL && *myDSN == "":
		return fail(errors.New("--dialect mysql needs --mysql-dsn (or $CHAINEDSQL_MYSQL_DSN)"))
	case d != datasets.Postgres && d != datasets.MySQL:
		return fail(fmt.Errorf("--dialect %q: want sqlite, postgres or mysql", *dialect))
	}
	live, logw := false, io.Writer(stderr)
	switch *progress {
	case "auto":
		f, ok := stderr.(*os.File)
		live = ok && term.IsTerminal(int(f.Fd()))
	case "live":
		live = true
	case "log":
	case "off":
		logw = nil
	default:
		return fail(fmt.Errorf("--progress %q: want auto, live, log or off", *progress))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	sopts, err := evalStudentOptions(os.Getenv, set, evalStudentFlags{
		tokenizer: *tokenizer, dtype: *dtype, backend: *backend, threads: *threads, mmap: *mmap, cacheTokens: *cacheTokens, batch: *batch,
	})
	if err != nil && strings.HasPrefix(spec, "student:") {
		return fail(err)
	}

	tasks, err := datasets.LoadTasks(*taskSpec, *dbRoot)
	if err != nil {
		return fail(fmt.Errorf("tasks %s: %w", *taskSpec, err))
	}
	if *limit > 0 && *limit < len(tasks) {
		tasks = tasks[:*limit]
	}
	var tcfg *teachers.Config
	if *configPath != "" || strings.HasPrefix(spec, "teacher:") || !strings.Contains(spec, ":") && spec != distill.OracleName {
		if tcfg, err = teachers.LoadConfig(*configPath); err != nil {
			return fail(err)
		}
	}
	h, err := policies.Resolve(spec, policies.Options{Teachers: tcfg, Student: sopts})
	if err != nil {
		return fail(err)
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("evals", h.Name)
	}
	conn := &datasets.Connector{SQLiteRoot: *dbRoot, PostgresDSN: *pgDSN, MySQLDSN: *myDSN,
		Access: datasets.Access{Reader: *reader, AsDSNUser: *asDSNUser}}
	defer conn.Close()
	// A missing database or a bad DSN is one clear error, not a run of failed episodes.
	if err := distill.CheckDatabases(ctx, conn, tasks, []datasets.Dialect{d}); err != nil {
		return fail(err)
	}
	for _, w := range conn.DSNUserWarnings(ctx, []datasets.Dialect{d}) {
		fmt.Fprintf(stderr, "student eval: WARNING: %s\n", w)
	}

	opts := chat.Options{Temperature: chat.Float(*temperature), MaxTokens: *maxTokens}
	s, err := evaluate.Run(ctx, evaluate.Config{
		Dir: dir, Tasks: tasks, TaskSpec: *taskSpec, Limit: *limit, Policy: h, Dialect: d,
		Samples: *samples, Vote: *vote, Batch: *batch, Shard: shard, Opener: conn, Toolkit: buildinfo.Version(),
		Episode:  distill.EpisodeOptions{MaxTurns: *maxTurns, ExecTimeout: *execTimeout, Chat: opts},
		Progress: logw, Interactive: live,
	})
	if s != nil {
		for _, r := range s.Repairs {
			fmt.Fprintf(stderr, "student eval: resume: %s\n", r)
		}
		fmt.Fprintf(stdout, "eval dir %s\n", dir)
		s.WriteText(stdout)
	}
	if errors.Is(err, evaluate.ErrInterrupted) {
		fmt.Fprintf(stderr, "student eval: %v\n", err)
		return exitInterrupted
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// evalPolicySpec joins --model and --policy into one policy spec.
func evalPolicySpec(model, policy string) (string, error) {
	switch {
	case model != "" && policy != "":
		return "", errors.New("give --model DIR or --policy SPEC, not both")
	case model != "":
		return "student:" + model, nil
	case policy != "":
		return policy, nil
	}
	return "", errors.New("give --model DIR (the student) or --policy SPEC (oracle, teacher:NAME, student:DIR)")
}

// readerDefault is --reader's default: $CHAINEDSQL_READER, else datasets.DefaultReader.
func readerDefault() string {
	if v := os.Getenv("CHAINEDSQL_READER"); v != "" {
		return v
	}
	return datasets.DefaultReader
}

// evalStudentFlags are eval's flags for the student:DIR policy.
type evalStudentFlags struct {
	tokenizer, dtype, backend string
	threads, cacheTokens      int
	batch                     int
	mmap                      bool
}

// evalStudentOptions builds the student:DIR policy's options: the documented
// CHAINEDSQL_STUDENT_* environment (policies.StudentEnv) first, then the flags the user gave
// (set names those that count only when given; the string flags and --threads count when
// non-empty or positive), and
// --batch as the generator's MaxBatch so that the conversations in flight decode together.
func evalStudentOptions(getenv func(string) string, set map[string]bool, f evalStudentFlags) (student.Options, error) {
	opts, err := policies.StudentEnv(getenv)
	if err != nil {
		return opts, err
	}
	if f.tokenizer != "" {
		opts.Tokenizer = f.tokenizer
	}
	if f.dtype != "" {
		opts.DType = f.dtype
	}
	if f.backend != "" {
		opts.Backend = f.backend // --backend (default cpu) wins over the environment, as it always has
	}
	if f.threads > 0 {
		opts.Threads = f.threads
	}
	if set["mmap"] {
		opts.Mmap = f.mmap
	}
	if set["cache-tokens"] {
		opts.Generate.CacheTokens = f.cacheTokens
	}
	if f.batch > 0 {
		opts.Generate.MaxBatch = f.batch
	}
	return opts, nil
}
