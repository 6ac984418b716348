// Package env serves the chained-sql/v1 protocol as a reinforcement-learning environment over
// HTTP/JSON: a trainer (TRL, verl, SkyRL, OpenRLHF) generates the assistant turns, the server
// executes their SQL on the task's real database, answers with the observation and scores the
// episode with the rewards of package rewards, judged exactly as student eval judges. See
// docs/ENV.md for the endpoints and a Python client.
package env

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/plural"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rewards"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/turns"
)

// Defaults of Config.
const (
	DefaultTTL         = 10 * time.Minute
	DefaultMaxEpisodes = 20000
	DefaultMaxBody     = 8 << 20
	DefaultMaxBatch    = 1024
	DefaultParallel    = 32
	// DefaultGoldCacheBytes bounds the gold results kept (64 MiB by sandbox.Size).
	DefaultGoldCacheBytes = 64 << 20
	// DefaultMaxStoreBytes bounds what the stored episodes hold (2 GiB by episodeSize).
	DefaultMaxStoreBytes = 2 << 30
)

// Config configures a Server. Zero values take the defaults.
type Config struct {
	// Tasks are the tasks served; their ids must be unique.
	Tasks []datasets.Task
	// Dialects are the dialects served; the first is the default of a request naming none.
	Dialects []datasets.Dialect
	// Opener opens a task's database in a dialect (a *sandbox.Connector).
	Opener episode.Opener
	// Episode carries the protocol options: MaxTurns, ExecTimeout, Caps, ReplyCap (default
	// textcap.EnvReply). Schemas, Ordered and the policy fields are set by the server.
	Episode episode.EpisodeOptions
	// Schemas caches the schema DDL per database (default a new cache with
	// episode.DefaultSchemaSamples values per column).
	Schemas *episode.SchemaCache
	// Weights weigh the rewards into "total"; nil means rewards.DefaultWeights.
	Weights *rewards.Weights
	// Tokenizer, when set, adds token ids and loss masks to the chat-template texts of each
	// episode's prompt and steps (package turns); nil gives the texts alone.
	Tokenizer turns.Encoder
	// RewardMode spreads an episode's total over its turns (default rewards.ModeFinal).
	RewardMode rewards.Mode
	// Subsets assigns the tasks to train and validation; nil means datasets.DefaultSubsets.
	Subsets *datasets.Subsets
	// TTL drops an episode this long after its last step (default 10 minutes).
	TTL time.Duration
	// MaxEpisodes caps the episodes kept in memory (default 20000).
	MaxEpisodes int
	// MaxEpisodesPerClient caps the episodes in play (not done) of one client, as
	// httpguard.Client names it (default half of MaxEpisodes, so that one client cannot fill the
	// store).
	MaxEpisodesPerClient int
	// MaxStoreBytes bounds the bytes the stored episodes hold, finished ones until they expire
	// or are dropped to make room (default DefaultMaxStoreBytes): a new episode is refused once
	// they hold three quarters of it, a step when what it may add does not fit (docs/ENV.md,
	// Bounds).
	MaxStoreBytes int64
	// MaxClientStoreBytes bounds the bytes one client's stored episodes hold (a share of
	// MaxStoreBytes, so that one client cannot fill the store; default half of it, as
	// MaxEpisodesPerClient is of MaxEpisodes): a new episode of the client is refused once they
	// hold three quarters of it, a step when what it may add does not fit.
	MaxClientStoreBytes int64
	// MaxBody caps a request body in bytes (default 8 MiB).
	MaxBody int64
	// MaxBatch caps the steps of one batch-step request and the completions of one score
	// request (default 1024).
	MaxBatch int
	// Parallel bounds the steps executing at once across all requests (default 32).
	Parallel int
	// GoldCacheBytes bounds the gold results kept for later episodes, by sandbox.Size (default
	// DefaultGoldCacheBytes); the least recently used go first.
	GoldCacheBytes int64
	// Logger receives server errors (5xx); nil logs nothing.
	Logger *log.Logger
	// Log, when set, receives every episode that finishes (its last step played), as one
	// trajectory of teacher LogTeacher keyed TASK/DIALECT/ID (ID: a digest of the episode id) with the client in Model
	// (docs/ENV.md, "Logging episodes"). Episodes deleted or expired before done are not logged.
	// The caller opens and closes it.
	Log *rundir.Log
}

// LogTeacher is the teacher name of the env's logged episodes (their shard files are
// env.DIALECT.NNNN.jsonl).
const LogTeacher = "env"

// Server is the environment. Create it with New, serve Handler, and Close it when done.
type Server struct {
	cfg      Config
	tasks    map[string]*datasets.Task
	order    []*datasets.Task // Config.Tasks' order, for listing
	splits   []string
	dialects map[datasets.Dialect]bool
	store    *store
	golds    *goldCache
	slots    *semaphore.Weighted
	stop     context.CancelFunc
	swept    chan struct{}
}

// New checks cfg and returns a Server; it starts a goroutine dropping expired episodes, which
// Close stops. It does not open databases: run episode.CheckDatabases first for a clear error on
// a missing one.
func New(cfg Config) (*Server, error) {
	if len(cfg.Tasks) == 0 {
		return nil, errors.New("env: no tasks to serve")
	}
	if len(cfg.Dialects) == 0 {
		return nil, errors.New("env: no dialects to serve")
	}
	if cfg.Opener == nil {
		return nil, errors.New("env: no database opener")
	}
	if cfg.Schemas == nil {
		cfg.Schemas = episode.NewSchemaCache(episode.DefaultSchemaSamples)
	}
	if cfg.Weights == nil {
		w := rewards.DefaultWeights
		cfg.Weights = &w
	}
	if cfg.Subsets == nil {
		sub := datasets.DefaultSubsets
		cfg.Subsets = &sub
	}
	if err := cfg.Subsets.Check(); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	if cfg.RewardMode == "" {
		cfg.RewardMode = rewards.ModeFinal
	}
	if _, err := rewards.ParseMode(string(cfg.RewardMode)); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxEpisodes <= 0 {
		cfg.MaxEpisodes = DefaultMaxEpisodes
	}
	if cfg.MaxEpisodesPerClient <= 0 {
		cfg.MaxEpisodesPerClient = max(1, cfg.MaxEpisodes/2)
	}
	if cfg.MaxEpisodesPerClient > cfg.MaxEpisodes {
		return nil, fmt.Errorf("env: %s per client is over the %d of the store", plural.Count(cfg.MaxEpisodesPerClient, "episode"), cfg.MaxEpisodes)
	}
	if cfg.MaxStoreBytes <= 0 {
		cfg.MaxStoreBytes = DefaultMaxStoreBytes
	}
	if cfg.MaxClientStoreBytes <= 0 {
		cfg.MaxClientStoreBytes = max(1, cfg.MaxStoreBytes/2)
	}
	if cfg.MaxClientStoreBytes > cfg.MaxStoreBytes {
		return nil, fmt.Errorf("env: %d bytes per client is over the %d of the store", cfg.MaxClientStoreBytes, cfg.MaxStoreBytes)
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.GoldCacheBytes <= 0 {
		cfg.GoldCacheBytes = DefaultGoldCacheBytes
	}
	if cfg.Episode.MaxTurns <= 0 {
		cfg.Episode.MaxTurns = protocol.DefaultMaxTurns
	}
	if cfg.Episode.ReplyCap <= 0 {
		cfg.Episode.ReplyCap = textcap.EnvReply // the episode parses the whole reply, keeps this much
	}
	s := &Server{
		cfg:      cfg,
		tasks:    make(map[string]*datasets.Task, len(cfg.Tasks)),
		dialects: map[datasets.Dialect]bool{},
		store:    newStore(cfg.TTL, cfg.MaxEpisodes, cfg.MaxEpisodesPerClient, cfg.MaxStoreBytes, cfg.MaxClientStoreBytes),
		golds:    newGoldCache(episode.JudgeBudget(cfg.Episode), cfg.GoldCacheBytes),
		slots:    semaphore.NewWeighted(int64(cfg.Parallel)),
		swept:    make(chan struct{}),
	}
	seenSplit := map[string]bool{}
	for i := range cfg.Tasks {
		t := &cfg.Tasks[i]
		if t.ID == "" {
			return nil, fmt.Errorf("env: task %d (db %s) has no id", i, t.DBID)
		}
		if _, dup := s.tasks[t.ID]; dup {
			return nil, fmt.Errorf("env: task id %s appears twice (two task files of one benchmark?)", t.ID)
		}
		s.tasks[t.ID] = t
		s.order = append(s.order, t)
		if sp := SplitOf(t.ID); !seenSplit[sp] {
			seenSplit[sp] = true
			s.splits = append(s.splits, sp)
		}
	}
	for _, d := range cfg.Dialects {
		s.dialects[d] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.sweepLoop(ctx)
	return s, nil
}

// SplitOf is the split a task id belongs to: the id up to its last "/" ("sample", "bird-dev",
// "bird-train", "spider-dev", "minidev"), or "" for an id without one.
func SplitOf(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return id[:i]
	}
	return ""
}

// Close stops dropping expired episodes. It does not close the Opener.
func (s *Server) Close() error {
	s.stop()
	<-s.swept
	return nil
}

// Episodes returns how many episodes are stored and how many of them are still in play.
func (s *Server) Episodes() (stored, live int) { return s.store.counts() }

func (s *Server) sweepLoop(ctx context.Context) {
	defer close(s.swept)
	every := min(max(s.cfg.TTL/4, time.Second), time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.store.sweep()
		}
	}
}

// logEpisode writes episode e, just done, to the log. A failure is logged, not answered: the
// step's reply stands.
func (s *Server) logEpisode(e *liveEpisode) {
	if s.cfg.Log == nil {
		return
	}
	tr := *e.st.Trajectory()
	// The id is the episode's capability: the key carries a digest of it, not the id.
	sum := sha256.Sum256([]byte(e.id))
	tr.Key = tr.TaskID + "/" + string(tr.Dialect) + "/" + hex.EncodeToString(sum[:8])
	tr.Teacher, tr.Model = LogTeacher, e.client
	if err := s.cfg.Log.Add(&tr); err != nil {
		s.logf("env: logging episode %s: %v", e.id, err)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Printf(format, args...)
	}
}
