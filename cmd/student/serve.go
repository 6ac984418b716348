package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/inference/generate"
	"github.com/chainedsql/chainedsql/inference/serve"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/regular"
)

var serveCmd = &cli.Command{
	Name:    "serve",
	Summary: "serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/models, /v1/weights)",
	Help: "Chat completions take n (up to --max-n choices), logprobs with top_logprobs (each token's log-probability under the distribution it was sampled from: " +
		"log-softmax of (logits + logit_bias) / temperature over the whole vocabulary, before top_k and top_p, as student rollout records them), " +
		"return_tokens_as_token_ids (vLLM's: with logprobs, each token named \"token_id:ID\") and logit_bias. " +
		"A request that leaves temperature, top_p, top_k or max_tokens out takes the server's defaults, as vLLM does: " +
		"--temperature, --top-p, --top-k and --max-tokens where given, else the model directory's generation_config.json " +
		"(its temperature, top_p, top_k and max_new_tokens; --generation-config none reads none), else temperature 1, top_p 1, no top-k and 2048 tokens; " +
		"the server says at start which it took and which of the file's settings it cannot apply (repetition_penalty, min_p). " +
		"POST /v1/weights {\"path\": DIR} reloads the weights from DIR (a trainer's save_pretrained directory of the same model) while serving: " +
		"they load fully first (a bad or mismatched checkpoint is refused and the old weights keep serving), requests running finish on the old weights, " +
		"which are released after the last of them; GET /v1/weights says which serve " +
		"(path: the directory read, symbolic links resolved, so a \"latest\" link names each checkpoint; requested_path: DIR as given). " +
		"Ctrl-C stops taking requests, waits up to 30s for those in flight and exits 0; a second one kills at once.",
	Setup: setupServe,
}

func setupServe(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	id := fs.String("model-id", "", "model id in /v1/models and replies (default the model directory's name)")
	maxBatch := fs.Int("max-batch", 16, "most requests decoded together")
	cacheTokens := fs.Int("cache-tokens", 65536, "tokens of finished conversations' KV caches kept for prefix reuse (negative: none)")
	maxTokens := fs.Int("max-tokens", defaultMaxTokens, "default max_tokens of a reply (not given: generation_config.json's max_new_tokens when it has one, else this default)")
	maxN := fs.Int("max-n", serve.DefaultMaxN, "most choices (n) one request may ask for")
	quiet := fs.Bool("quiet", false, "no request log on stderr")
	gc := addGenerationConfig(fs, "")
	temperature := fs.Float64("temperature", 0, "default temperature of a request that sends none (default: generation_config.json's, else 1)")
	topP := fs.Float64("top-p", 0, "default top_p of a request that sends none (default: generation_config.json's, else 1)")
	topK := fs.Int("top-k", 0, "default top_k of a request that sends none; 0 or -1: no cut (default: generation_config.json's, else no cut)")
	tokenIDs := fs.Bool("return-tokens-as-token-ids", false, `return_tokens_as_token_ids of a request that sends none: name each logprobs token "token_id:ID" (vLLM's flag)`)
	weightsRoot := addWeightsRoot(fs, "")
	guard := cli.AddGuard(fs, true)
	return func(ctx context.Context, c *cli.Call) error {
		if err := cmp.Or(mf.check(), gc.check()); err != nil {
			return err
		}
		if *maxBatch < 1 || *maxTokens < 1 || *maxN < 1 {
			return cli.Usagef("--max-batch, --max-tokens and --max-n must be at least 1")
		}
		if err := guard.Check(); err != nil {
			return err
		}
		given := c.Given()
		g, err := gc.read(mf.dir)
		if err != nil {
			return err
		}
		d, flags := g.Apply(serve.NeutralDefaults), []string{}
		switch {
		case !(*temperature >= 0 && *temperature <= 2):
			return cli.Usagef("--temperature %v: want 0 to 2, as a request's", *temperature)
		case given["top-p"] && !(*topP > 0 && *topP <= 1):
			return cli.Usagef("--top-p %v: want more than 0, at most 1, as a request's", *topP)
		case *topK < -1:
			return cli.Usagef("--top-k %d: want -1 or more (0 and -1: no cut)", *topK)
		}
		if given["temperature"] {
			d.Temperature, flags = *temperature, append(flags, "--temperature")
		}
		if given["top-p"] {
			d.TopP, flags = *topP, append(flags, "--top-p")
		}
		if given["top-k"] {
			d.TopK, flags = max(*topK, 0), append(flags, "--top-k")
		}
		replyTokens := *maxTokens
		if given["max-tokens"] {
			flags = append(flags, "--max-tokens")
		} else if g.MaxNewTokens != nil {
			replyTokens = *g.MaxNewTokens
		}
		opts := mf.options()
		opts.ModelID = *id
		opts.Sampling = student.Sampling{MaxTokens: replyTokens}
		opts.Generate = generate.Config{MaxBatch: *maxBatch, CacheTokens: *cacheTokens}
		st, err := mf.open(opts)
		if err != nil {
			return err
		}
		sw, err := newSwap(c, st, mf.dir, *weightsRoot, opts)
		if err != nil {
			st.Close()
			return err
		}
		defer sw.Close()
		fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, gc.note(g, d, replyTokens, flags))
		return serveHTTP(ctx, c, *addr, guard, *quiet, st.ModelID(), func(logger *log.Logger) http.Handler {
			return serve.Handler(sw, logger, serve.Config{MaxN: *maxN, Defaults: &d, TokenIDs: *tokenIDs})
		})
	}
}

// addWeightsRoot defines --weights-root on fs, its help starting with prefix.
func addWeightsRoot(fs *flag.FlagSet, prefix string) *string {
	return fs.String("weights-root", "", prefix+"POST /v1/weights loads weights only from this directory or below it, symbolic links resolved: "+
		"a directory named through .. or a link out of it, or whose .json or .safetensors files link out of it, is refused (403); / allows any "+
		"(default: the directory holding --model's, its links resolved)")
}

// newSwap serves st, loaded from dir, reloading weights with opts (Student.Successor), only
// from root or below it ("": the directory holding dir, its links resolved), which it says.
func newSwap(c *cli.Call, st *student.Student, dir, root string, opts student.Options) (*serve.Swap[*student.Student], error) {
	flag := "--weights-root"
	if root == "" {
		resolved, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, err
		}
		if resolved, err = filepath.Abs(resolved); err != nil {
			return nil, err
		}
		root, flag = filepath.Dir(resolved), "--weights-root, by default the directory holding --model's"
	}
	sw := serve.NewSwap(st, dir, func(_ context.Context, dir string, cur *student.Student, open *regular.Opener) (*student.Student, error) {
		o := opts
		o.Opener = open
		return cur.Successor(dir, o)
	})
	if err := sw.Confine(root); err != nil {
		return nil, cli.Usagef("--weights-root %s: %v", root, err)
	}
	fmt.Fprintf(c.Stderr, "%s: POST /v1/weights loads weights only from under %s (%s)\n", c.Name, sw.Root(), flag)
	return sw, nil
}

// defaultMaxTokens is a chat server's max_tokens for a request that sends none, when neither a
// flag nor generation_config.json says otherwise.
const defaultMaxTokens = 2048

// generationConfig is --generation-config: whether a chat server takes its sampling defaults
// from the model directory's generation_config.json.
type generationConfig struct{ mode string }

// addGenerationConfig defines --generation-config on fs, its help starting with prefix.
func addGenerationConfig(fs *flag.FlagSet, prefix string) *generationConfig {
	g := &generationConfig{}
	fs.StringVar(&g.mode, "generation-config", "auto", prefix+"where chat completions' sampling defaults come from: auto, the model directory's generation_config.json "+
		"(its temperature, top_p, top_k, max_new_tokens; as vLLM's default --generation-config auto), or none (temperature 1, top_p 1, no top-k: vLLM's --generation-config vllm)")
	return g
}

// check returns the usage error of a value other than auto and none.
func (g *generationConfig) check() error {
	if g.mode != "auto" && g.mode != "none" {
		return cli.Usagef("--generation-config %q: want auto or none", g.mode)
	}
	return nil
}

// read returns the generation config of the model in dir under the flag (none: an empty one).
func (g *generationConfig) read(dir string) (serve.GenerationConfig, error) {
	if g.mode == "none" {
		return serve.GenerationConfig{}, nil
	}
	return serve.ReadGenerationConfig(dir)
}

// note is the start-up log line of a chat server whose defaults are d and maxTokens, taken from
// gen and from the flags named.
func (g *generationConfig) note(gen serve.GenerationConfig, d serve.Defaults, maxTokens int, flags []string) string {
	src := gen.Note()
	if g.mode == "none" {
		src = "--generation-config none: " + serve.GenerationConfigFile + " not read"
	}
	if len(flags) > 0 {
		src += "; set by " + strings.Join(flags, ", ")
	}
	return fmt.Sprintf("sampling defaults of a request that leaves them out: %s, max_tokens %d (%s)", d, maxTokens, src)
}

// serveHTTP serves handler(logger) on addr behind guard's checks until ctx ends (Ctrl-C), then
// waits up to 30s for requests in flight. logger writes the request log to stderr (nil when
// quiet).
func serveHTTP(ctx context.Context, c *cli.Call, addr string, guard *cli.Guard, quiet bool, model string, handler func(logger *log.Logger) http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var logger *log.Logger
	if !quiet {
		logger = log.New(c.Stderr, "", log.LstdFlags)
	}
	g, err := guard.New(ln, c.Name, serve.MaxBodyBytes, c.Stderr)
	if err != nil {
		ln.Close()
		return err
	}
	srv := g.Server(handler(logger), logger)
	fmt.Fprintf(c.Stderr, "%s: model %s on http://%s/v1\n", c.Name, model, ln.Addr())
	return cli.Serve(ctx, srv, ln, 30*time.Second, func() {
		fmt.Fprintf(c.Stderr, "%s: shutting down (waiting up to 30s for requests in flight)\n", c.Name)
	})
}
