package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/teachers"
)

// The flag groups the binaries share: each flag's name, default and help are defined here
// once. A note argument adds what the flag means for one command to the shared help.

func withNote(help, note string) string {
	if note == "" {
		return help
	}
	return help + "; " + note
}

// TaskOptions shapes the --tasks group of one command.
type TaskOptions struct {
	// Default is the spec used when --tasks is not given ("" with Required).
	Default string
	// Required makes a missing --tasks a usage error.
	Required bool
	// Repeat lets --tasks be given several times, each spec adding tasks.
	Repeat bool
	// Limit adds --limit.
	Limit bool
	// Note says what the tasks are for.
	Note string
}

// Tasks are the flags --tasks, --db-root and (optionally) --limit.
type Tasks struct {
	// DBRoot is --db-root, the directory holding <db>/<db>.sqlite ("" for the task file's).
	DBRoot string
	// Limit is --limit, the first N tasks only (0: all).
	Limit int
	specs specList
	opts  TaskOptions
}

// AddTasks defines the tasks group on fs.
func AddTasks(fs *flag.FlagSet, o TaskOptions) *Tasks {
	t := &Tasks{opts: o, specs: specList{repeat: o.Repeat}}
	help := "tasks: sample (the bundled benchmark), bird:PATH/dev.json, minidev:PATH, spider:PATH"
	switch {
	case o.Repeat:
		help += "; repeat for several (e.g. train and dev)"
	}
	if o.Required {
		help += " (required)"
	}
	if o.Default != "" {
		help += "; default " + o.Default
	}
	fs.Var(&t.specs, "tasks", withNote(help, o.Note))
	fs.StringVar(&t.DBRoot, "db-root", "", "directory holding <db>/<db>.sqlite, overriding the task file's")
	if o.Limit {
		fs.IntVar(&t.Limit, "limit", 0, "use only the first N tasks (0 = all)")
	}
	return t
}

// Specs are the task specs given, else the default.
func (t *Tasks) Specs() []string {
	if len(t.specs.list) == 0 && t.opts.Default != "" {
		return []string{t.opts.Default}
	}
	return t.specs.list
}

// Spec is the one task spec of a command without Repeat ("" when none).
func (t *Tasks) Spec() string {
	s := t.Specs()
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// Check returns the usage error of a missing --tasks or a negative --limit.
func (t *Tasks) Check() error {
	if len(t.Specs()) == 0 {
		return Usagef("--tasks is required (sample, bird:PATH/dev.json, minidev:PATH or spider:PATH)")
	}
	if t.Limit < 0 {
		return Usagef("--limit %d is negative", t.Limit)
	}
	return nil
}

// Load checks the flags and loads the tasks of every spec, the first --limit of them.
func (t *Tasks) Load() ([]datasets.Task, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	var tasks []datasets.Task
	for _, spec := range t.Specs() {
		ts, err := datasets.LoadTasks(spec, t.DBRoot)
		if err != nil {
			return nil, fmt.Errorf("tasks %s: %w", spec, err)
		}
		tasks = append(tasks, ts...)
	}
	if t.Limit > 0 && t.Limit < len(tasks) {
		tasks = tasks[:t.Limit]
	}
	return tasks, nil
}

// specList is the --tasks value: the last spec given, or every one with repeat.
type specList struct {
	list   []string
	repeat bool
}

func (l *specList) String() string { return strings.Join(l.list, " ") }

func (l *specList) placeholder() string { return "SPEC" }

// Set takes one spec, refusing a form ParseSpec does not know (a usage error, before any file
// is read); whether its path loads is Load's to find out.
func (l *specList) Set(v string) error {
	if _, err := datasets.ParseSpec(v); err != nil {
		return err
	}
	if !l.repeat {
		l.list = l.list[:0]
	}
	l.list = append(l.list, v)
	return nil
}

// ReaderDefault is --reader's default: $CHAINEDSQL_READER, else sandbox.DefaultReader.
func ReaderDefault() string {
	if v := os.Getenv("CHAINEDSQL_READER"); v != "" {
		return v
	}
	return sandbox.DefaultReader
}

// AddReader defines --reader on fs.
func AddReader(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "reader", ReaderDefault(), "role (PostgreSQL) or user (MySQL) the statements run as on the servers: distill load creates or updates it and grants it read access to the loaded databases; the DSNs' users only look up its password; default $CHAINEDSQL_READER or "+sandbox.DefaultReader)
}

// DSNs are the database server flags: a DSN flag per server dialect (--pg-dsn, --mysql-dsn),
// --reader, --exec-as-dsn-user.
type DSNs struct {
	// DSN holds each server dialect's DSN flag value by dialect.
	DSN map[datasets.Dialect]*string
	// Reader is the role or user statements run as.
	Reader string
	// AsDSNUser runs the statements as the DSNs' own users.
	AsDSNUser bool
}

// AddDSNs defines the DSN group on fs: the DSN flag of every registered server dialect.
func AddDSNs(fs *flag.FlagSet) *DSNs {
	d := &DSNs{DSN: map[datasets.Dialect]*string{}}
	for _, x := range sandbox.Dialects() {
		if srv := x.Server(); srv != nil {
			d.DSN[x.Name()] = fs.String(srv.Flag, os.Getenv(srv.Env), srv.Usage+"; default $"+srv.Env)
		}
	}
	AddReader(fs, &d.Reader)
	fs.BoolVar(&d.AsDSNUser, "exec-as-dsn-user", false, "run the statements as the DSNs' own users instead of the reader: UNSAFE unless you made those users read-only yourself")
	return d
}

// Check returns the usage error of a server dialect without its DSN.
func (d *DSNs) Check(dialects []datasets.Dialect) error {
	for _, x := range dialects {
		dl, ok := sandbox.Lookup(x)
		if !ok || dl.Server() == nil {
			continue
		}
		if p := d.DSN[x]; p == nil || *p == "" {
			return Usagef("dialect %s needs --%s (or $%s)", x, dl.Server().Flag, dl.Server().Env)
		}
	}
	return nil
}

// Connect returns the Connector for the flags and sqliteRoot after Check and opening every
// task database once in each dialect (episode.CheckDatabases: a missing database or a bad DSN
// is one error, not a run of failed episodes); it prints the warnings of --exec-as-dsn-user to
// stderr after name. The caller closes the Connector.
func (d *DSNs) Connect(ctx context.Context, sqliteRoot string, tasks []datasets.Task, dialects []datasets.Dialect, stderr io.Writer, name string) (*sandbox.Connector, error) {
	return d.ConnectFor(ctx, sqliteRoot, func(datasets.Dialect) []datasets.Task { return tasks }, dialects, stderr, name)
}

// ConnectFor is Connect checking in each dialect only the databases of tasksIn(dialect): those
// a command will use there (curate view: the tasks its rows of that dialect came from).
func (d *DSNs) ConnectFor(ctx context.Context, sqliteRoot string, tasksIn func(datasets.Dialect) []datasets.Task, dialects []datasets.Dialect, stderr io.Writer, name string) (*sandbox.Connector, error) {
	if err := d.Check(dialects); err != nil {
		return nil, err
	}
	dsn := map[datasets.Dialect]string{}
	for x, p := range d.DSN {
		dsn[x] = *p
	}
	conn := &sandbox.Connector{DSN: dsn, SQLiteRoot: sqliteRoot,
		Access: sandbox.Access{Reader: d.Reader, AsDSNUser: d.AsDSNUser}}
	for _, x := range dialects {
		if err := episode.CheckDatabases(ctx, conn, tasksIn(x), []datasets.Dialect{x}); err != nil {
			conn.Close()
			return nil, err
		}
	}
	for _, w := range conn.DSNUserWarnings(ctx, dialects) {
		fmt.Fprintf(stderr, "%s: WARNING: %s\n", name, w)
	}
	for _, x := range dialects {
		if n, of := noReference(ctx, conn, tasksIn(x), x); n > 0 {
			fmt.Fprintf(stderr, "%s: WARNING: %d of %d tasks on %s have SQLite gold only and no SQLite database here (--db-root): where that gold fails on %s, they are unjudged, not judged against their SQLite answer\n",
				name, n, of, x, x)
		}
	}
	return conn, nil
}

// noReference counts the tasks among tasks with a SQLite reference on d
// (datasets.Task.GoldReference) whose SQLite database conn cannot open, of those with one.
func noReference(ctx context.Context, conn *sandbox.Connector, tasks []datasets.Task, d datasets.Dialect) (missing, with int) {
	opens := map[string]bool{} // by database
	for _, t := range tasks {
		ref, ok := t.GoldReference(d)
		if !ok {
			continue
		}
		with++
		key := t.DBID + "\x00" + t.DBPath
		ok, seen := opens[key]
		if !seen {
			_, err := conn.Open(ctx, ref, t)
			ok = err == nil
			opens[key] = ok
		}
		if !ok {
			missing++
		}
	}
	return missing, with
}

// Disconnect prints, after name, a warning for each of dialects whose statements outlived their
// deadline and what should have stopped them there (sandbox.Runaways), then closes conn.
func Disconnect(conn *sandbox.Connector, dialects []datasets.Dialect, stderr io.Writer, name string) {
	for _, d := range dialects {
		if r := conn.Runaways(d); r.Total > 0 {
			fmt.Fprintf(stderr, "%s: WARNING: %d %s statement(s) ran on past their deadline where the engine could not stop them (%d still running); see \"Execution security\" in docs/DESIGN.md\n",
				name, r.Total, d, r.Running)
		}
	}
	conn.Close()
}

// Dialects is a --dialects list or a --dialect flag, checked as it is parsed.
type Dialects struct {
	list    []datasets.Dialect
	multi   bool
	allowed []datasets.Dialect
}

// AddDialects defines --dialects, a comma-separated list defaulting to sqlite.
func AddDialects(fs *flag.FlagSet, note string) *Dialects {
	d := &Dialects{list: []datasets.Dialect{datasets.SQLite}, multi: true, allowed: sandbox.Names()}
	fs.Var(d, "dialects", withNote("comma-separated dialects: "+dialectFlags(), note))
	return d
}

// AddDialect defines --dialect, one of allowed (every dialect when none), defaulting to def
// ("" for none).
func AddDialect(fs *flag.FlagSet, def datasets.Dialect, note string, allowed ...datasets.Dialect) *Dialects {
	if len(allowed) == 0 {
		allowed = sandbox.Names()
	}
	d := &Dialects{allowed: allowed}
	if def != "" {
		d.list = []datasets.Dialect{def}
	}
	fs.Var(d, "dialect", withNote("dialect: "+dialectNames(allowed, " or "), note))
	return d
}

// List is the dialects given, or the default.
func (d *Dialects) List() []datasets.Dialect { return d.list }

// One is the dialect of --dialect ("" when none was given and there is no default).
func (d *Dialects) One() datasets.Dialect {
	if len(d.list) == 0 {
		return ""
	}
	return d.list[0]
}

// String is the flag's value.
func (d *Dialects) String() string {
	if d == nil {
		return ""
	}
	names := make([]string, len(d.list))
	for i, x := range d.list {
		names[i] = string(x)
	}
	return strings.Join(names, ",")
}

func (d *Dialects) placeholder() string {
	if d.multi {
		return "LIST"
	}
	return "DIALECT"
}

// Set parses the flag's value.
func (d *Dialects) Set(v string) error {
	if d.multi {
		list, err := parseDialects(v, d.allowed)
		if err != nil {
			return err
		}
		d.list = list
		return nil
	}
	x := datasets.Dialect(strings.ToLower(strings.TrimSpace(v)))
	for _, a := range d.allowed {
		if x == a {
			d.list = []datasets.Dialect{x}
			return nil
		}
	}
	return fmt.Errorf("want %s", dialectNames(d.allowed, " or "))
}

// parseDialects parses a comma-separated list of dialect names (any case, blanks ignored), each
// one of allowed.
func parseDialects(list string, allowed []datasets.Dialect) ([]datasets.Dialect, error) {
	var out []datasets.Dialect
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(strings.ToLower(s))
		if s == "" {
			continue
		}
		d := datasets.Dialect(s)
		if !slices.Contains(allowed, d) {
			return nil, fmt.Errorf("unknown dialect %q (want %s)", s, dialectNames(allowed, ", "))
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no dialect", list)
	}
	return out, nil
}

// dialectFlags lists the registered dialects, each server one with its DSN flag:
// "sqlite, postgres (--pg-dsn), mysql (--mysql-dsn)".
func dialectFlags() string {
	var out []string
	for _, x := range sandbox.Dialects() {
		if srv := x.Server(); srv != nil {
			out = append(out, fmt.Sprintf("%s (--%s)", x.Name(), srv.Flag))
		} else {
			out = append(out, string(x.Name()))
		}
	}
	return strings.Join(out, ", ")
}

// dialectNames lists ds, the last two joined by last (" or ", or ", ").
func dialectNames(ds []datasets.Dialect, last string) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = string(d)
	}
	return joinLast(names, last)
}

// joinLast joins names with ", ", the last two with last: "a, b or c".
func joinLast(names []string, last string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + last + names[len(names)-1]
}

// Progress is the --progress flag: auto, live, log or off.
type Progress struct{ mode string }

// AddProgress defines --progress on fs.
func AddProgress(fs *flag.FlagSet) *Progress {
	p := &Progress{mode: "auto"}
	fs.Var(p, "progress", "progress output: auto (live on a terminal, else log lines), live, log, off")
	return p
}

// String is the flag's value.
func (p *Progress) String() string {
	if p == nil {
		return ""
	}
	return p.mode
}

func (p *Progress) placeholder() string { return "MODE" }

// Set parses the flag's value.
func (p *Progress) Set(v string) error {
	switch v {
	case "auto", "live", "log", "off":
		p.mode = v
		return nil
	}
	return fmt.Errorf("want auto, live, log or off")
}

// Writers returns where progress goes: live redraws a status on stderr, log (nil for off) gets
// progress lines.
func (p *Progress) Writers(stderr io.Writer) (live bool, log io.Writer) {
	switch p.mode {
	case "auto":
		f, ok := stderr.(*os.File)
		return ok && term.IsTerminal(int(f.Fd())), stderr
	case "live":
		return true, stderr
	case "off":
		return false, nil
	}
	return false, stderr
}

// Shard is the --shard flag: part I/N of the work.
type Shard struct {
	// Shard is the part parsed (the zero value: all of it).
	rundir.Shard
}

// AddShard defines --shard on fs; what names what is split ("the tasks").
func AddShard(fs *flag.FlagSet, what, note string) *Shard {
	s := &Shard{}
	fs.Var(s, "shard", withNote("do only part I/N of "+what+" (e.g. 0/4, one per machine)", note))
	return s
}

func (s *Shard) placeholder() string { return "I/N" }

// Set parses the flag's value.
func (s *Shard) Set(v string) error {
	sh, err := rundir.ParseShard(v)
	if err != nil {
		return err
	}
	s.Shard = sh
	return nil
}

// Episode are the flags of one episode: --max-turns, --exec-timeout and, for the commands that
// have them, --obs-rows and --obs-cell.
type Episode struct {
	MaxTurns    int
	ExecTimeout time.Duration
	ObsRows     int
	ObsCell     int
}

// AddEpisode defines the episode group on fs; obs adds the observation caps.
func AddEpisode(fs *flag.FlagSet, obs bool) *Episode {
	e := &Episode{ObsRows: protocol.DefaultObsRows, ObsCell: protocol.DefaultObsCellChars}
	fs.IntVar(&e.MaxTurns, "max-turns", protocol.DefaultMaxTurns, "turn budget per episode")
	fs.DurationVar(&e.ExecTimeout, "exec-timeout", episode.DefaultExecTimeout, "timeout of each SQL statement")
	if obs {
		fs.IntVar(&e.ObsRows, "obs-rows", protocol.DefaultObsRows, "rows shown in an observation")
		fs.IntVar(&e.ObsCell, "obs-cell", protocol.DefaultObsCellChars, "widest cell shown in an observation (characters)")
	}
	return e
}

// Options are the flags as episode.EpisodeOptions.
func (e *Episode) Options() episode.EpisodeOptions {
	return episode.EpisodeOptions{MaxTurns: e.MaxTurns, ExecTimeout: e.ExecTimeout,
		Caps: protocol.ObsCaps{MaxRows: e.ObsRows, MaxCellChars: e.ObsCell}}
}

// Out is the --out flag, the directory a command writes.
type Out struct {
	// Dir is the directory given, or the default.
	Dir      string
	required bool
}

// AddOut defines --out on fs: what says what the directory holds, def is the default ("" for
// none), required makes a missing --out a usage error.
func AddOut(fs *flag.FlagSet, def, what string, required bool) *Out {
	o := &Out{required: required}
	if required {
		what += " (required)"
	}
	fs.StringVar(&o.Dir, "out", def, what)
	return o
}

// Check returns the usage error of a required --out not given.
func (o *Out) Check() error {
	if o.required && o.Dir == "" {
		return Usagef("--out DIR is required")
	}
	return nil
}

// CheckRunDir returns an error unless dir may be written as a run dir of the given kind ("a run
// dir", "an eval dir"): missing, empty, a run dir to resume (it holds a manifest.json), or the
// empty shards folder an interrupted first start leaves. Anything else, a Parquet dataset or a
// folder of notes, is refused untouched.
func CheckRunDir(dir, kind string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.ManifestFile)); err == nil {
		return nil
	}
	for _, e := range entries {
		if e.Name() == rundir.ShardsDir && e.IsDir() {
			if sub, err := os.ReadDir(filepath.Join(dir, e.Name())); err == nil && len(sub) == 0 {
				continue
			}
		}
		return fmt.Errorf("--out %s is not empty and is not %s to resume (it has %s and no %s); remove it or choose another --out",
			dir, kind, e.Name(), rundir.ManifestFile)
	}
	return nil
}

// TokenizerEnv names the environment variable holding the default tokenizer path.
const TokenizerEnv = "CHAINEDSQL_TOKENIZER"

// DefaultTokenizer is $CHAINEDSQL_TOKENIZER, else ../shared/tokenizer/qwen2.5 when that
// directory exists, else "".
func DefaultTokenizer() string {
	if p := os.Getenv(TokenizerEnv); p != "" {
		return p
	}
	p := filepath.Join("..", "shared", "tokenizer", "qwen2.5")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// FallbackTokenizer is the tokenizer a model directory without tokenizer.json takes: given
// when set, else DefaultTokenizer ("" when neither is). The student subcommands that load a
// model and distill's student:DIR policy fill student.Options.Tokenizer with it.
func FallbackTokenizer(given string) string {
	if given != "" {
		return given
	}
	return DefaultTokenizer()
}

// TokenizerPath is the tokenizer to load: flag (--tokenizer) when given, else DefaultTokenizer;
// neither is a usage error saying how to name one.
func TokenizerPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p := DefaultTokenizer(); p != "" {
		return p, nil
	}
	return "", Usagef("no tokenizer: pass --tokenizer PATH (a tokenizer.json or its directory) or set %s", TokenizerEnv)
}

// AddTokenizer defines --tokenizer on fs, defaulting (when empty) to DefaultTokenizer.
func AddTokenizer(fs *flag.FlagSet, note string) *string {
	return fs.String("tokenizer", "", withNote("tokenizer.json or its directory (default $"+TokenizerEnv+", else ../shared/tokenizer/qwen2.5 when present)", note))
}

// Teachers is the --config flag, the teachers config file.
type Teachers struct {
	// Config is the file's path ("": none; teachers.LoadConfig then reads the environment).
	Config string
}

// AddTeachers defines --config on fs.
func AddTeachers(fs *flag.FlagSet) *Teachers {
	t := &Teachers{}
	fs.StringVar(&t.Config, "config", "", "teachers config file (YAML; see teachers/example.yaml) for the teacher names and teacher:NAME")
	return t
}

// Load reads the teachers config when --config was given or a policy spec of the
// comma-separated specs may name a configured teacher; otherwise it returns nil.
func (t *Teachers) Load(specs string) (*teachers.Config, error) {
	if t.Config == "" && !NeedsTeachers(specs) {
		return nil, nil
	}
	return teachers.LoadConfig(t.Config)
}

// NeedsTeachers reports whether any spec of the comma-separated list may name a configured
// teacher: a bare name or teacher:NAME, not the oracle or another prefix (student:DIR).
func NeedsTeachers(specs string) bool {
	for _, s := range strings.Split(specs, ",") {
		s = strings.TrimSpace(s)
		if s == "" || s == episode.OracleName {
			continue
		}
		if p, _, ok := strings.Cut(s, ":"); ok && p != "teacher" {
			continue
		}
		return true
	}
	return false
}
