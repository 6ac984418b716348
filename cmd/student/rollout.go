package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/distill"
	"github.com/chainedsql/chainedsql/inference/cuda"
	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/buildinfo"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rollout"
	"github.com/chainedsql/chainedsql/rundir"
)

var rolloutCmd = &cli.Command{
	Name:    "rollout",
	Summary: "GRPO groups: G episodes per task from the student, to Parquet with token ids, masks, log-probs, rewards and advantages (docs/ROLLOUT.md)",
	Help: "All episodes are decoded together (--batch at once) and the file is written when all are done; Ctrl-C writes nothing. " +
		"With --serve ADDR it runs no rollout at start but listens: POST /v1/rollouts {\"out\": FILE, \"seed\": N} runs one with the flags' settings and answers its report, " +
		"POST /v1/weights {\"path\": DIR} reloads the weights between rollouts (a rollout runs wholly on the weights serving when it starts), " +
		"and the rest of student serve's API answers too. Ctrl-C stops it. " +
		"--log-dir also writes every episode to a run dir (curate build, stats and view read it), appending to one of the same tasks and options.",
	Setup: setupRollout,
}

func setupRollout(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	tasks := cli.AddTasks(fs, cli.TaskOptions{Required: true, Limit: true})
	dsns := cli.AddDSNs(fs)
	dialect := cli.AddDialect(fs, datasets.SQLite, "the engine the tasks run on")
	episode := cli.AddEpisode(fs, false)
	rw := cli.AddRewards(fs)
	var (
		out         = fs.String("out", "", "Parquet file to write (required)")
		group       = fs.Int("group", 8, "G: episodes per task")
		temperature = fs.Float64("temperature", 1, "sampling temperature (0 = greedy)")
		topP        = fs.Float64("top-p", 1, "nucleus sampling mass (1 = off)")
		topK        = fs.Int("top-k", 0, "keep the k most likely tokens (0 = off)")
		seed        = fs.Int64("seed", 0, "seed of the sampling (each turn of each episode draws from its own seed derived from it; bit-for-bit repeats need --batch 1 --cache-tokens -1)")
		maxTokens   = fs.Int("max-tokens", 1024, "completion token limit per turn")
		batch       = fs.Int("batch", 256, "most sequences decoded together")
		cacheTokens = fs.Int("cache-tokens", 65536, "tokens of finished requests' KV caches kept for prefix reuse (negative: none)")
		addr        = fs.String("serve", "", "listen on ADDR and run rollouts on request (POST /v1/rollouts), reloading weights between them (POST /v1/weights); --out is then the default file")
		quiet       = fs.Bool("quiet", false, "with --serve: no request log on stderr")
		profile     = fs.String("cpuprofile", "", "without --serve: write a CPU profile of the rollout (pprof) to this file")
		logDir      = fs.String("log-dir", "", "also write every episode as a trajectory to this run dir, keyed TASK/seedSEED/gGROUP/sSAMPLE (a run dir of the same tasks and options is appended to)")
	)
	guard := cli.AddGuard(fs, true)
	return func(ctx context.Context, c *cli.Call) error {
		if err := mf.check(); err != nil {
			return err
		}
		if *out == "" && *addr == "" {
			return cli.Usagef("--out FILE is required")
		}
		if err := guard.Check(); err != nil {
			return err
		}
		if *group < 1 || *maxTokens < 1 || *batch < 1 || episode.MaxTurns < 1 || *temperature < 0 || *topP < 0 || *topP > 1 || *topK < 0 {
			return cli.Usagef("--group %d, --max-tokens %d, --batch %d, --max-turns %d, --temperature %g, --top-p %g, --top-k %d: out of range",
				*group, *maxTokens, *batch, episode.MaxTurns, *temperature, *topP, *topK)
		}
		if *group > 1 && *temperature == 0 {
			return cli.Usagef("--group %d at --temperature 0 repeats one greedy episode; set --temperature > 0", *group)
		}
		w, mode, err := rw.Parse()
		if err != nil {
			return err
		}
		if err := tasks.Check(); err != nil {
			return err
		}
		if b, _ := student.ParseBackend(mf.backend); b != student.BackendCPU {
			if err := cuda.Check(b); err != nil {
				return fmt.Errorf("--backend %s: %w", b, err)
			}
		}
		dialects := dialect.List()
		if err := dsns.Check(dialects); err != nil {
			return err
		}
		ts, err := tasks.Load()
		if err != nil {
			return err
		}
		conn, err := dsns.Connect(ctx, tasks.DBRoot, ts, dialects, c.Stderr, c.Name)
		if err != nil {
			return err
		}
		defer conn.Close()
		opts := mf.options()
		opts.Generate = generate.Config{MaxBatch: *batch, CacheTokens: *cacheTokens}
		st, err := mf.open(opts)
		if err != nil {
			return err
		}
		var runLog *rundir.Log
		if *logDir != "" {
			eo := episode.Options()
			runLog, err = rundir.OpenLog(*logDir, &rundir.Manifest{
				Format: rundir.RunFormat, Protocol: protocol.ProtocolVersion, Toolkit: buildinfo.Version(), Created: time.Now().UTC(),
				Tasks:    rundir.ManifestTasks{Spec: tasks.Spec(), Limit: tasks.Limit, Count: len(ts), Digest: distill.TasksDigest(ts)},
				Teachers: []rundir.ManifestTeacher{{Name: rollout.LogTeacher, Spec: "student rollout"}},
				Dialects: dialects, Samples: *group, MaxTurns: eo.MaxTurns, Caps: eo.Caps, ExecTimeout: eo.ExecTimeout,
			})
			if err != nil {
				return err
			}
			defer runLog.Close()
			for _, r := range runLog.Repairs() {
				fmt.Fprintf(c.Stderr, "%s: %s: %s\n", c.Name, *logDir, r)
			}
		}
		// run plays one rollout on st and writes it to file (and to the log, with --log-dir).
		run := func(ctx context.Context, st *student.Student, file string, seed int64) (*rollout.Report, error) {
			rows, rep, err := rollout.Run(ctx, rollout.Config{
				Tasks: ts, Dialect: dialect.One(), Opener: conn, Episode: episode.Options(),
				Generator: st.Generator(), Tokenizer: st.Tokenizer(), Model: st.ModelID(),
				Group: *group, Temperature: *temperature, TopP: *topP, TopK: *topK, Seed: seed, MaxTokens: *maxTokens,
				Weights: &w, Mode: mode, Log: runLog,
			})
			if err != nil {
				return nil, err
			}
			if err := rollout.Write(file, rows); err != nil {
				return nil, err
			}
			fmt.Fprintf(c.Stderr, "%s: %d episodes (%d tasks × %d) to %s; %d tokens generated at %.1f tokens/s (%d in %d decode steps, %.1f a step, at %.1f tokens/s: set against student bench's batched decode at that batch and depth), mean reward %.4g\n",
				c.Name, rep.Episodes, len(ts), *group, file, rep.GeneratedTokens, rep.DecodeTokensPerSec,
				rep.DecodeStepTokens, rep.DecodeSteps, float64(rep.DecodeStepTokens)/float64(max(rep.DecodeSteps, 1)), rep.DecodeStepTokensPerSec, rep.MeanReward)
			return rep, nil
		}
		if *addr != "" {
			sw := serve.NewSwap(st, mf.dir, func(_ context.Context, dir string, cur *student.Student) (*student.Student, error) {
				return cur.Successor(dir, opts)
			})
			defer sw.Close()
			rs := &rolloutServer{swap: sw, out: *out, seed: *seed, run: run}
			return serveHTTP(ctx, c, *addr, guard, *quiet, st.ModelID(), func(logger *log.Logger) http.Handler {
				rs.log = logger
				mux := http.NewServeMux()
				mux.HandleFunc("/v1/rollouts", rs.rollouts)
				mux.Handle("/", serve.Handler(sw, logger))
				return mux
			})
		}
		defer st.Close()
		stop, abort, err := startProfile(*profile)
		if err != nil {
			return err
		}
		defer abort()
		rep, err := run(ctx, st, *out, *seed)
		if cerr := stop(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", " ")
		return enc.Encode(rep)
	}
}

// rolloutServer answers POST /v1/rollouts for student rollout --serve: one rollout at a time,
// on the weights serving when it starts.
type rolloutServer struct {
	swap    *serve.Swap[*student.Student]
	out     string // the default file
	seed    int64  // the default seed
	run     func(ctx context.Context, st *student.Student, file string, seed int64) (*rollout.Report, error)
	running sync.Mutex
	log     *log.Logger // nil: no log
}

// rolloutReply is POST /v1/rollouts' answer.
type rolloutReply struct {
	Object string `json:"object"` // "rollout"
	Out    string `json:"out"`
	Seed   int64  `json:"seed"`
	// Weights are the weights every episode of the rollout was decoded with.
	Weights serve.WeightsInfo `json:"weights"`
	*rollout.Report
}

func (rs *rolloutServer) rollouts(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		serve.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" /v1/rollouts: method not allowed (use POST)")
		return
	}
	var req struct {
		Out  string `json:"out"`
		Seed *int64 `json:"seed"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		serve.WriteError(w, http.StatusBadRequest, "", fmt.Sprintf(`request body is not {"out": "FILE", "seed": N}: %v`, err))
		return
	}
	reply := rolloutReply{Object: "rollout", Out: cmp.Or(req.Out, rs.out), Seed: rs.seed}
	if req.Seed != nil {
		reply.Seed = *req.Seed
	}
	if reply.Out == "" {
		serve.WriteError(w, http.StatusBadRequest, "", `out: the Parquet file to write is required ({"out": "FILE"}; the server has no --out)`)
		return
	}
	if !rs.running.TryLock() {
		serve.WriteError(w, http.StatusConflict, "rollout_in_progress", "a rollout is already running; retry when it ends")
		return
	}
	defer rs.running.Unlock()
	st, info, release, err := rs.swap.Acquire()
	if err != nil {
		serve.WriteError(w, http.StatusServiceUnavailable, "closing", err.Error())
		return
	}
	defer release()
	reply.Weights = info
	rs.logf("rollouts: seed %d to %s on weights version %d", reply.Seed, reply.Out, info.Version)
	reply.Report, err = rs.run(r.Context(), st, reply.Out, reply.Seed)
	if err != nil {
		rs.logf("rollouts: %s failed: %v", reply.Out, err)
		serve.WriteError(w, http.StatusInternalServerError, "rollout_failed", err.Error())
		return
	}
	serve.WriteJSON(w, http.StatusOK, reply)
}

func (rs *rolloutServer) logf(format string, args ...any) {
	if rs.log != nil {
		rs.log.Printf(format, args...)
	}
}
