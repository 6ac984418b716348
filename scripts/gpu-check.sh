#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU (issue 15), in one run that ends by itself
# within GPU_CHECK_BUDGET seconds (default 450: one call of the device tool, with room left in
# a 15-minute lease for a second, shorter one). Stages, most important first; each gets what is
# left of the budget less 20 s up to its own cap (ckpt 120 s, parity 120, depth 90 with at most
# 60 per student bench run, eval 45, eval-bird 100, hf 120, bench 60, sanitize 2 x 60: 775 s in
# all, ckpt to eval-bird 475), and one that reaches its time is stopped with SIGQUIT (a goroutine
# dump), killed 10 s later, and summarized as "FAIL (out of time ...)". The 20 s held back cover
# that kill and the summary, so the run ends within the budget: stages that would start with under
# 20 s are skipped ("skipped (out of time)") and the summary's last lines name them with the
# GPU_CHECK_ONLY line that runs them next (on the same warm machine the checkpoint is reused).
#   setup    the bundle unpacked, nvidia-smi, which cuBLAS the loader will find (always run);
#   ckpt     a random Qwen2.5-0.5B checkpoint (bf16) written by qwen2's benchmark writer, unless
#            one is already there (always run: the other stages use it);
#   parity   every test of inference/cuda on the device (CHAINEDSQL_CUDA_TEST=cuda): selftest,
#            each kernel against the CPU op, the tiny checkpoint against the reference logits and
#            the CPU backend, batched decode, graphs (bucketed, launches per step counted),
#            device sampling, cuBLAS prefill, the PTX assembled by the machine's ptxas, and the
#            0.5B checkpoint against the CPU backend;
#   depth    student bench --backend cuda --depth D for D in 0, 2048 (GPU_CHECK_DEPTHS): decode
#            at batch 1 and at 64/256 (GPU_CHECK_BATCHES) with D tokens already in each cache, and
#            a 512-token prefill after D (llama-bench's -d); one line per depth;
#   eval     student eval --backend cuda on the BIRD layout (the 56 sample questions as dev.json
#            + dev_databases) at batch 56 with the random 0.5B checkpoint, 256 tokens a turn;
#   eval-bird the same on 1,534 tasks (the sample's repeated; GPU_CHECK_BIRD_TASKS) at batch 256,
#            5 turns x 256 tokens;
#   hf       Hugging Face transformers on the same checkpoint (built from its config.json, no
#            download), where torch and transformers see the GPU: a static cache and the forward
#            under torch.compile (reduce-overhead), decode after a 2,048-token prompt at batch 1
#            and 64 (GPU_CHECK_HF_DEPTH, GPU_CHECK_HF_BATCHES);
#   bench    the inference/cuda benchmarks: batch-1 decode, batched decode at 8/32/128, top-p
#            decode, decode sampled without a cut (DecodeNoCut), decode with logits copied back, 512-token prefill, and a 2,048-token prefill
#            with prefill attention on the tensor cores and on f32 FMAs (PrefillLong/kernel=mma
#            and kernel=f32);
#   sanitize compute-sanitizer memcheck and racecheck over the kernel tests and TestMMA (what the
#            emulator cannot show: out-of-bounds device accesses, shared-memory races).
# The summary ends with the issue's figures: ours, transformers' and the goal on each line. One
# run of the default budget reaches hf when the stages before it end under their caps; bench and
# sanitize then want a second run (GPU_CHECK_ONLY="bench sanitize").
# The lent machines have no Go toolchain and no ../shared: run scripts/gpu-bundle.sh first and
# carry .gpu (prebuilt binaries and the shared test data); without a bundle the script builds
# with go when go is on PATH. Results: $OUT (default /tmp/gpu-check) gets summary.txt and one log
# per stage (all small); bulky files go to GPU_CHECK_WORK (default /tmp/gpu-check-work).
# Env: GPU_CHECK_BUDGET (seconds), GPU_CHECK_ONLY / GPU_CHECK_SKIP (stage names, space-separated),
# GPU_CHECK_RUN (a -test.run pattern for the parity stage, to rerun what failed), GPU_CHECK_CKPT
# (a checkpoint directory to reuse), CHAINEDSQL_SHARED (shared data, when there is no bundle),
# GPU_CHECK_BACKEND (cuda; cuda-emulated dry-runs the script on the CPU with a bundle built by
# GPU_BUNDLE_TAGS=cudaemu scripts/gpu-bundle.sh), GPU_CHECK_DEPTHS and GPU_CHECK_BATCHES (the
# depth stage's depths and batch sizes), GPU_CHECK_DEPTH_ARGS (more student bench flags for it,
# which win: "--gen 2 --repeat 1 --prompt 8" makes a dry run on the emulator short),
# GPU_CHECK_EVAL_ARGS (more student eval flags for eval and eval-bird, which win: "--max-tokens 4
# --max-turns 1" with GPU_CHECK_BIRD_TASKS=60 for a dry run), GPU_CHECK_CAP_SCALE (percent applied
# to every stage cap, default 100; the budget still bounds the run).
# Dry run on the CPU (2 cores: about 5 minutes; every stage runs but sanitize, which needs a
# device, and hf, which needs torch on a GPU): GPU_BUNDLE_TAGS=cudaemu scripts/gpu-bundle.sh, then
#   GPU_CHECK_BACKEND=cuda-emulated GPU_CHECK_CKPT=../shared/models/tiny-qwen2-f32 \
#   GPU_CHECK_BUDGET=900 GPU_CHECK_CAP_SCALE=300 GPU_CHECK_DEPTHS="0 64" GPU_CHECK_BATCHES=4 \
#   GPU_CHECK_DEPTH_ARGS="--gen 2 --repeat 1 --prompt 8" GPU_CHECK_BIRD_TASKS=60 \
#   GPU_CHECK_EVAL_ARGS="--max-tokens 4 --max-turns 1" bash scripts/gpu-check.sh
# (the tiny checkpoint: the 0.5B one takes minutes a stage on the emulator; without
# GPU_CHECK_CKPT it is written as on the device, and the stages are cut at their caps).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
# Paths absolute, as the stages run from their packages' directories.
OUT=$(realpath -m "${OUT:-/tmp/gpu-check}")
WORK=$(realpath -m "${GPU_CHECK_WORK:-/tmp/gpu-check-work}")
[ -n "${CHAINEDSQL_SHARED:-}" ] && CHAINEDSQL_SHARED=$(realpath -m "$CHAINEDSQL_SHARED")
BUDGET=${GPU_CHECK_BUDGET:-450}
CAP_SCALE=${GPU_CHECK_CAP_SCALE:-100}
mkdir -p "$OUT" "$WORK" || exit 1
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
: >"$WORK/figures"
T0=$SECONDS
status=0
note() { echo "$*" | tee -a "$SUMMARY"; }
stamp() { echo "[$((SECONDS - T0))s] $*"; }
wanted() {
	if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $1 "* ]]; then return 1; fi
	[[ " ${GPU_CHECK_SKIP:-} " != *" $1 "* ]]
}
# budget CAP: seconds the next stage may take (the rest of the budget, at most CAP scaled by
# GPU_CHECK_CAP_SCALE, less 10 s for the summary and the 10 s a stopped command may take to
# die); 0 when too little is left to start it. budget_raw CAP: the same without the scaling.
budget() { budget_raw $(($1 * CAP_SCALE / 100)); }
budget_raw() {
	local left=$((BUDGET - (SECONDS - T0) - 20)) c=$1
	((left < c)) && c=$left
	((c < 20)) && c=0
	echo "$c"
}
# run SECONDS CMD...: CMD under timeout (SIGQUIT first, so a Go binary prints its goroutines;
# exit status 124 when it ran out of time).
run() {
	local t=$1
	shift
	timeout -s QUIT -k 10 "$t" "$@"
}
# outcome RC [LOG]: how a stage's command ended, for the summary; a Go test binary stopped by its
# own -test.timeout (exit 2) counts as out of time, with the tests it was running.
outcome() {
	local running
	if [ -n "${2:-}" ] && grep -q '^panic: test timed out' "$2"; then
		running=$(awk '/^panic: test timed out/ {on = 1; next} on && /^\t\t/ {sub(/^\t+/, ""); printf "%s%s", sep, $0; sep = ", "} on && /^$/ {exit}' "$2")
		echo "FAIL (out of time; running: ${running:-?})"
		return
	fi
	case $1 in
	0) echo PASS ;;
	124 | 137) echo "FAIL (out of time)" ;;
	*) echo "FAIL (exit $1)" ;;
	esac
}
# outoftime STAGE: note that STAGE got no time, and remember it for the rerun line at the end.
CUT=""
outoftime() {
	note "$1: skipped (out of time)"
	CUT+=" $1"
}

note "== gpu-check $(date -u +%FT%TZ) on $(hostname), budget ${BUDGET}s"
[ -d /usr/local/cuda/bin ] && PATH=$PATH:/usr/local/cuda/bin

# ---- setup: binaries and shared data ----
BIN=$WORK/bin
if [ -f .gpu/bundle.tar.xz ]; then
	rm -rf "$WORK/bundle" && mkdir -p "$WORK/bundle"
	if command -v xz >/dev/null; then
		xz -dc .gpu/bundle.tar.xz | tar -C "$WORK/bundle" -xf -
	else
		python3 -c '
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # Python before 3.12
        t.extractall(sys.argv[2])' .gpu/bundle.tar.xz "$WORK/bundle"
	fi || { note "setup: cannot unpack .gpu/bundle.tar.xz"; exit 1; }
	BIN=$WORK/bundle/bin
	export CHAINEDSQL_SHARED=$WORK/bundle/shared
	note "bundle: $(tr '\n' ';' <"$WORK/bundle/BUNDLE")"
elif command -v go >/dev/null; then
	note "no .gpu/bundle.tar.xz: building with $(go version)"
	mkdir -p "$BIN"
	{ go test -c -o "$BIN/cuda.test" ./inference/cuda && go test -c -o "$BIN/qwen2.test" ./inference/qwen2 &&
		go build -o "$BIN/student" ./cmd/student; } >"$OUT/setup.txt" 2>&1 || { note "setup: build failed (setup.txt)"; exit 1; }
	if [ -z "${CHAINEDSQL_SHARED:-}" ]; then
		for d in "$ROOT/shared" "$ROOT/../shared"; do
			if [ -d "$d/models" ]; then
				CHAINEDSQL_SHARED=$(cd "$d" && pwd)
				export CHAINEDSQL_SHARED
				break
			fi
		done
	fi
else
	note "setup: no .gpu/bundle.tar.xz and no go on PATH: run scripts/gpu-bundle.sh here and carry .gpu"
	exit 1
fi
SHARED=${CHAINEDSQL_SHARED:-}
cuda_major=""
if command -v nvidia-smi >/dev/null; then
	{ echo "== nvidia-smi" && nvidia-smi; } >>"$OUT/setup.txt" 2>&1
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
	cuda_major=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9]*' | grep -o '[0-9]*$')
else
	note "no nvidia-smi"
fi
# The loader dlopens libcublas.so.13/.12/.11 by name; where none is on the library path (a
# toolkit outside ld.so.conf, or only the pip wheel torch brought), point it at one and put its
# directory (libcublasLt beside it) on LD_LIBRARY_PATH.
if [ -z "${CHAINEDSQL_CUDA_CUBLAS:-}" ] && ! ldconfig -p 2>/dev/null | grep -qE 'libcublas\.so\.1[1-3] '; then
	roots=(/usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu)
	while read -r d; do roots+=("$d"); done < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
	for v in 13 12 11; do
		[ -n "$cuda_major" ] && ((v > cuda_major)) && continue
		lib=$(find "${roots[@]}" -maxdepth 4 -name "libcublas.so.$v" 2>/dev/null | head -1)
		if [ -n "$lib" ]; then
			CHAINEDSQL_CUDA_CUBLAS=$lib
			LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
			export CHAINEDSQL_CUDA_CUBLAS LD_LIBRARY_PATH
			break
		fi
	done
	echo "picked: ${CHAINEDSQL_CUDA_CUBLAS:-none}" >>"$OUT/setup.txt"
fi
note "cuBLAS: ${CHAINEDSQL_CUDA_CUBLAS:-by name from the library path} ($(ldconfig -p 2>/dev/null | grep -oE 'libcublas\.so\.1[1-3]' | sort -u | tr '\n' ' '))"
note "ptxas: $(command -v ptxas >/dev/null && ptxas --version | tail -1 || echo none)"
BACKEND=${GPU_CHECK_BACKEND:-cuda}
export CHAINEDSQL_CUDA_TEST=$BACKEND
PKG=$ROOT/inference/cuda # the tests read kernels/ relative to their package

# ---- ckpt: the random 0.5B checkpoint ----
CKPT=$(realpath -m "${GPU_CHECK_CKPT:-$WORK/q05b-bf16}")
if [ ! -f "$CKPT/model.safetensors" ]; then
	t=$(budget 120)
	stamp "writing the random Qwen2.5-0.5B checkpoint to $CKPT"
	if ((t == 0)) || ! (cd "$ROOT/inference/qwen2" && CHAINEDSQL_BENCH_05B=$CKPT run "$t" "$BIN/qwen2.test" -test.run '^$' -test.bench 'Load/stored' -test.benchtime 1x) >>"$OUT/setup.txt" 2>&1; then
		note "ckpt: writing the 0.5B checkpoint failed (setup.txt); the stages that need it are skipped"
		CKPT=""
		status=1
	fi
fi
[ -n "$CKPT" ] && note "ckpt: $CKPT ($(du -sh "$CKPT" | cut -f1))"

# ---- parity ----
if wanted parity; then
	t=$(budget 120)
	stamp "parity tests on the device (${t}s)"
	if ((t == 0)); then
		outoftime parity
	else
		(cd "$PKG" && CHAINEDSQL_CUDA_PARITY_MODEL=$CKPT run "$t" "$BIN/cuda.test" -test.v -test.count 1 \
			-test.timeout "$((t - 5))s" -test.run "${GPU_CHECK_RUN:-.}") >"$OUT/parity.txt" 2>&1
		rc=$?
		pass=$(grep -c -- '^--- PASS' "$OUT/parity.txt") fail=$(grep -c -- '^--- FAIL' "$OUT/parity.txt")
		note "parity: $(outcome $rc "$OUT/parity.txt"): $pass passed, $fail failed, $(grep -c -- '^--- SKIP' "$OUT/parity.txt") skipped"
		# A skip's reason is the log line just before its "--- SKIP".
		awk '/^--- SKIP/ {print "  skip " $3 ": " prev} {sub(/^ +/, ""); prev = $0}' "$OUT/parity.txt" | head -5 | tee -a "$SUMMARY"
		# Each failure with the log line before it (its message), and any panic.
		((rc != 0)) && status=1 && awk '/^ *--- FAIL/ {print "  " prev; print} /^panic:/ {print} {prev = $0}' "$OUT/parity.txt" | head -30 | tee -a "$SUMMARY"
		grep -E '_test\.go:[0-9]+: (device: |.*(max abs error|differ from the CPU|cuBLAS and own kernels differ|differ by at most))|sm_90 .* registers' "$OUT/parity.txt" | sed 's/^ *//' | head -30 | tee -a "$SUMMARY"
	fi
fi

# ---- depth: decode and prefill after D tokens in the cache ----
if wanted depth && [ -n "$CKPT" ] && command -v python3 >/dev/null; then
	note "== student bench --depth D ($(basename "$CKPT"); tok/s: prefill of 512 after D, decode at batch 1 and each batch)"
	: >"$OUT/depth.txt"
	stage_end=$((SECONDS + $(budget 90))) # the whole stage; each run of student bench at most 60 s
	for depth in ${GPU_CHECK_DEPTHS:-0 2048}; do
		line="depth $depth:"
		first=1 # the first run of a depth also times the prefill and batch-1 decode
		for batch in ${GPU_CHECK_BATCHES:-64 256}; do
			t=$((stage_end - SECONDS)) per_run=$((60 * CAP_SCALE / 100))
			t=$(budget_raw $((t < per_run ? t : per_run)))
			((t == 0)) && { line+=" (no time left for batch $batch)"; CUT+=" depth"; break; }
			stamp "student bench --depth $depth --batch $batch (${t}s)"
			prompt=0
			((first)) && prompt=512
			# 32 greedy steps per run, the median of 2 runs after a warm-up; the depth's tokens
			# are computed once per run of student bench, untimed.
			run "$t" "$BIN/student" bench --backend "$BACKEND" --model "$CKPT" --json --quiet --depth "$depth" \
				--batch "$batch" --prompt "$prompt" --gen 32 --repeat 2 ${GPU_CHECK_DEPTH_ARGS:-} >"$WORK/depth.json" 2>>"$OUT/depth.txt"
			rc=$?
			{ echo "== depth $depth batch $batch: exit $rc" && cat "$WORK/depth.json"; } >>"$OUT/depth.txt"
			if ((rc != 0)); then
				status=1
				line+=" b$batch $(outcome $rc)"
			else
				line+=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
s = " prefill %.0f, b1 %.0f, " % (r["prefill_tok_s"], r["decode_tok_s"]) if sys.argv[2] == "1" else ", "
print(s + "b%d %.0f" % (r["batch"], r["batch_decode_tok_s"]), end="")
with open(sys.argv[3], "a") as f:
    if sys.argv[2] == "1":
        f.write("b1_d%s %.1f\n" % (sys.argv[4], r["decode_tok_s"]))
    f.write("b%d_d%s %.1f\n" % (r["batch"], sys.argv[4], r["batch_decode_tok_s"]))' "$WORK/depth.json" "$first" "$WORK/figures" "$depth")
			fi
			first=0
		done
		note "$line"
	done
elif wanted depth; then
	note "depth: skipped (no checkpoint or no python3)"
fi

# ---- eval and eval-bird: student eval on BIRD-layout task sets ----
# fig KEY VALUE: a figure for the closing table ($WORK/figures, one "KEY VALUE" a line).
fig() { echo "$1 $2" >>"$WORK/figures"; }
TOK=""
[ -n "$SHARED" ] && [ -f "$SHARED/tokenizer/qwen2.5/tokenizer.json" ] && TOK=$SHARED/tokenizer/qwen2.5
# birdset DIR N: the sample's questions as a BIRD-layout dev.json of N tasks (the 56 repeated,
# each copy its own question_id) with dev_databases built from datasets/sample.
birdset() {
	python3 - "$1" "$2" <<'EOF'
import json, os, sqlite3, sys
out, n = sys.argv[1], int(sys.argv[2])
src = "datasets/sample"
qs = json.load(open(os.path.join(src, "questions.json")))
os.makedirs(out, exist_ok=True)
for db in sorted({q["db_id"] for q in qs}):
    d = os.path.join(out, "dev_databases", db)
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, db + ".sqlite")
    if os.path.exists(p):
        os.remove(p)
    con = sqlite3.connect(p)
    con.executescript(open(os.path.join(src, "db", db + ".sql")).read())
    con.commit()
    con.close()
dev = [{"question_id": i, "db_id": q["db_id"], "question": q["question"], "evidence": q.get("evidence", ""),
        "SQL": q["gold"]["sqlite"], "difficulty": q.get("difficulty", "simple")} for i, q in ((i, qs[i % len(qs)]) for i in range(n))]
json.dump(dev, open(os.path.join(out, "dev.json"), "w"), indent=1)
print("wrote", len(dev), "tasks to", out)
EOF
}
# evalstage NAME TASKS BATCH CAP FLAGS...: student eval --backend $BACKEND over a BIRD-layout set
# of TASKS tasks at --batch BATCH (FLAGS, then GPU_CHECK_EVAL_ARGS, which win); the wall time and
# the generator's counters go to the summary and the figures (NAME_s, NAME_gen, NAME_fwd).
evalstage() {
	local name=$1 n=$2 batch=$3 cap=$4
	shift 4
	if ! { wanted "$name" && [ -n "$CKPT" ] && [ -n "$TOK" ] && command -v python3 >/dev/null; }; then
		wanted "$name" && note "$name: skipped (no checkpoint, no tokenizer under ${SHARED:-the shared data}, or no python3)"
		return
	fi
	local t rc=0 start log=$OUT/$name.txt set=$WORK/bird-$n
	if (($(budget "$cap") == 0)); then
		outoftime "$name"
		return
	fi
	# The task set first, so that the eval's time is what is left after it.
	birdset "$set" "$n" >"$log" 2>&1 || { note "$name: cannot build the task set ($name.txt)"; status=1; return; }
	t=$(budget "$cap")
	if ((t == 0)); then
		outoftime "$name"
		return
	fi
	stamp "student eval --backend $BACKEND, $n tasks at batch $batch (${t}s)"
	fig "${name}_n" "$n"
	rm -rf "$WORK/$name"
	start=$SECONDS
	run "$t" "$BIN/student" eval --model "$CKPT" --tokenizer "$TOK" --tasks "bird:$set/dev.json" --backend "$BACKEND" \
		--batch "$batch" --progress log --out "$WORK/$name" "$@" ${GPU_CHECK_EVAL_ARGS:-} >>"$log" 2>&1
	rc=$?
	local wall=$((SECONDS - start))
	if ((rc != 0)); then
		note "$name: $(outcome "$rc") after $wall s ($name.txt)"
		status=1
		grep -E '^[0-9:]+ .* done [0-9]+/' "$log" | tail -1 | tee -a "$SUMMARY"
		grep -m3 -E '^(panic|SIGQUIT|student|Error|error)' "$log" | tee -a "$SUMMARY"
		return
	fi
	fig "${name}_s" "$wall"
	python3 - "$WORK/$name/usage.json" "$name" "$wall" "$n" "$batch" "$WORK/figures" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import json, sys
u = json.load(open(sys.argv[1]))
name, wall, n, batch, figs = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def find(o):
    if isinstance(o, dict):
        if "generated" in o and "forwards" in o:
            return o
        for v in o.values():
            r = find(v)
            if r: return r
    return None
c = find(u)
line = "%s: %d s wall (model load included) for %s tasks at batch %s" % (name, wall, n, batch)
if c:
    line += "; %d requests, %d prompt tokens (%d from cache), %d generated (%.0f tok/s over the wall), %d forwards, max batch %d" % (
        c["requests"], c["prompt_tokens"], c["cached_tokens"], c["generated"], c["generated"] / max(wall, 1), c["forwards"], c["max_batch_seen"])
    with open(figs, "a") as f:
        f.write("%s_gen %.1f\n%s_fwd %d\n" % (name, c["generated"] / max(wall, 1), name, c["forwards"]))
print(line)
EOF
	tail -4 "$log" >>"$SUMMARY"
}
evalstage eval 56 56 45 --max-tokens 256
evalstage eval-bird "${GPU_CHECK_BIRD_TASKS:-1534}" 256 100 --max-tokens 256 --max-turns 5

# ---- hf: the peer, transformers with a static cache and torch.compile ----
hf_why=""
if wanted hf; then
	# Why the peer cannot run here, if it cannot: the last line of the import's error, or no GPU.
	# (stderr apart: warnings torch or transformers print on import do not stop the peer.)
	hf_why="no checkpoint"
	if [ -n "$CKPT" ] && ! hf_why=$(python3 -c '
import torch, transformers
if not torch.cuda.is_available():
    print("torch %s sees no GPU" % torch.__version__)' 2>"$WORK/hf-import.txt"); then
		hf_why=$(tail -1 "$WORK/hf-import.txt")
		hf_why=${hf_why:-python3 failed}
	fi
	[ -n "$hf_why" ] && note "hf: skipped ($hf_why)"
fi
hf_t=0
wanted hf && [ -z "$hf_why" ] && { hf_t=$(budget 120); ((hf_t == 0)) && outoftime hf; }
if ((hf_t > 0)); then
	t=$hf_t
	stamp "Hugging Face transformers (${t}s)"
	note "== Hugging Face transformers, same checkpoint (bf16, greedy; static cache + torch.compile reduce-overhead; tok/s)"
	PYTHONUNBUFFERED=1 run "$t" python3 - "$CKPT" "${GPU_CHECK_HF_DEPTH:-2048}" "${GPU_CHECK_HF_BATCHES:-1 64}" "$WORK/figures" <<'EOF' >"$OUT/hf.txt" 2>&1
# Decode after a DEPTH-token prompt as transformers' own recipe for speed has it: a StaticCache
# and the forward compiled with mode="reduce-overhead" (CUDA graphs), one token per sequence per
# call. The prompt is prefilled eagerly into the cache (untimed); then 8 compiled warm-up steps
# (the compile), then 32 timed steps.
import inspect, sys, time, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache
d, depth, batches, figs = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3].split()], sys.argv[4]
cfg = AutoConfig.from_pretrained(d)
try:
    m = AutoModelForCausalLM.from_pretrained(d, config=cfg, dtype=torch.bfloat16)
except TypeError:  # transformers before 4.56 names it torch_dtype
    m = AutoModelForCausalLM.from_pretrained(d, config=cfg, torch_dtype=torch.bfloat16)
m = m.cuda().eval()
print("transformers", transformers.__version__, "torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
V = cfg.vocab_size
step = torch.compile(m.forward, mode="reduce-overhead", fullgraph=True)
def static_cache(batch, n):
    ps = inspect.signature(StaticCache.__init__).parameters
    kw = dict(config=cfg, max_cache_len=n)
    for k, v in (("max_batch_size", batch), ("batch_size", batch), ("device", "cuda"), ("dtype", torch.bfloat16)):
        if k in ps:
            kw[k] = v
    return StaticCache(**kw)
@torch.no_grad()
def decode(batch, warm=8, steps=32):
    cache = static_cache(batch, depth + warm + steps + 1)
    ids = torch.randint(0, V, (batch, depth), device="cuda")
    # The base model, then the LM head on the last position only (logits of every prompt
    # position would take batch x depth x vocab values).
    h = m.model(input_ids=ids, cache_position=torch.arange(depth, device="cuda"), past_key_values=cache, use_cache=True)
    tok = m.lm_head(h.last_hidden_state[:, -1:]).argmax(-1)
    pos = depth
    def one():
        nonlocal tok, pos
        o = step(input_ids=tok, cache_position=torch.tensor([pos], device="cuda"), past_key_values=cache, use_cache=True)
        tok = o.logits[:, -1:].argmax(-1).clone()
        pos += 1
    t = time.time()
    for _ in range(warm):
        one()
    torch.cuda.synchronize()
    print(f"hf compile+warm-up batch={batch}: {time.time() - t:.1f} s", flush=True)
    t = time.time()
    for _ in range(steps):
        one()
    torch.cuda.synchronize()
    return batch * steps / (time.time() - t)
for b in batches:
    try:
        r = decode(b)
    except Exception as e:  # a transformers version whose forward breaks the graph
        print(f"hf: fullgraph compile failed ({type(e).__name__}: {e}); compiling without fullgraph", flush=True)
        step = torch.compile(m.forward, mode="reduce-overhead")
        r = decode(b)
    print(f"hf decode depth={depth} batch={b} {r:.1f} tok/s", flush=True)
    with open(figs, "a") as f:
        f.write(f"hf_b{b}_d{depth} {r:.1f}\n")
EOF
	grep -E '^(hf |transformers )' "$OUT/hf.txt" | tee -a "$SUMMARY"
	grep -qE "^hf decode .* batch=${GPU_CHECK_HF_BATCHES##* } " "$OUT/hf.txt" || { note "hf: incomplete (hf.txt)"; tail -3 "$OUT/hf.txt" | tee -a "$SUMMARY"; }
fi

# ---- bench ----
if wanted bench && [ -n "$CKPT" ]; then
	t=$(budget 60)
	if ((t == 0)); then
		outoftime bench
	else
		stamp "benchmarks (${t}s)"
		note "== benchmarks ($(basename "$CKPT"); tok/s)"
		(cd "$PKG" && CHAINEDSQL_CUDA_BENCH_MODEL=$CKPT run "$t" "$BIN/cuda.test" -test.count 1 -test.timeout "$((t - 5))s" \
			-test.run '^$' -test.bench . -test.benchtime 3x) >"$OUT/bench.txt" 2>&1
		rc=$?
		if ((rc != 0)); then
			status=1
			note "bench: $(outcome $rc "$OUT/bench.txt") (bench.txt)"
			grep -m3 -E '^(panic|SIGQUIT|\s+\S+_test\.go:[0-9]+:|--- FAIL)' "$OUT/bench.txt" | tee -a "$SUMMARY"
		fi
		grep -E '^Benchmark' "$OUT/bench.txt" | awk '{print $1, $(NF-1), $NF}' | tee -a "$SUMMARY"
		grep -m1 ' on ' "$OUT/bench.txt" | sed 's/^ *//' | tee -a "$SUMMARY"
	fi
fi

# ---- sanitize ----
if wanted sanitize; then
	if [ "$BACKEND" != cuda ]; then
		note "sanitize: skipped (backend $BACKEND: no device accesses to check)"
	elif ! command -v compute-sanitizer >/dev/null; then
		note "sanitize: skipped (no compute-sanitizer)"
	else
		: >"$OUT/sanitize.txt"
		for tool in memcheck racecheck; do
			t=$(budget 60)
			((t == 0)) && { outoftime "sanitize $tool"; continue; }
			stamp "compute-sanitizer $tool (${t}s)"
			(cd "$PKG" && CHAINEDSQL_CUDA_CUBLAS=off run "$t" compute-sanitizer --tool "$tool" --error-exitcode 99 \
				"$BIN/cuda.test" -test.v -test.count 1 -test.timeout "$((t - 5))s" -test.run 'Kernel|Selftest|^TestMMA$') >"$WORK/sanitize-$tool.txt" 2>&1
			rc=$?
			{ echo "== $tool (exit $rc)"; cat "$WORK/sanitize-$tool.txt"; } >>"$OUT/sanitize.txt"
			n=$(grep -c -- '^--- PASS' "$WORK/sanitize-$tool.txt")
			if ! grep -q -- '^=== RUN' "$WORK/sanitize-$tool.txt"; then
				note "sanitize $tool: the sanitizer could not run here (exit $rc): $(grep -m1 -v 'COMPUTE-SANITIZER' "$WORK/sanitize-$tool.txt")"
				continue
			fi
			# A test binary stopped by its -test.timeout is out of time, unless the sanitizer found
			# errors before it (exit 99 then, which must not read as a timeout).
			((rc != 99)) && grep -q '^panic: test timed out' "$WORK/sanitize-$tool.txt" && rc=124
			case $rc in
			0) note "sanitize $tool: clean over $n passing tests" ;;
			99) status=1 && note "sanitize $tool: ERRORS (sanitize.txt)" && grep -m6 -E '^========= +(Invalid|Error|Race|Program hit)' "$WORK/sanitize-$tool.txt" | tee -a "$SUMMARY" ;;
			124 | 137) note "sanitize $tool: out of time after $n tests (sanitize.txt)" ;;
			*) status=1 && note "sanitize $tool: tests failed under the sanitizer (exit $rc; sanitize.txt)" ;;
			esac
			grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$WORK/sanitize-$tool.txt" | tail -1 | tee -a "$SUMMARY"
		done
	fi
fi

# ---- the issue's figures: ours, the peer's and the goal (H200) per line ----
if [ -f "$WORK/figures" ] && command -v python3 >/dev/null; then
	note "== ours / transformers (static cache + compile) / goal (issue 27, H200)"
	python3 - "$WORK/figures" <<'EOF' | tee -a "$SUMMARY"
import sys
f = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    f[k] = float(v)
def g(k):
    return "%.0f" % f[k] if k in f else "-"
rows = [
    ("decode b1 after 8 tokens, tok/s", "b1_d0", "", ">= 1,500"),
    ("decode b1 at depth 2048, tok/s", "b1_d2048", "hf_b1_d2048", ">= 1,200"),
    ("decode b64 at depth 2048, tok/s", "b64_d2048", "hf_b64_d2048", ">= 25,000"),
    ("decode b256 at depth 2048, tok/s", "b256_d2048", "", ">= 60,000"),
    ("eval %s tasks at batch 56, s wall" % g("eval_n"), "eval_s", "", "<= 5 (56 tasks)"),
    ("eval-bird %s tasks (5 turns x 256) at batch 256, s wall" % g("eval-bird_n"), "eval-bird_s", "", "<= 90 (1,534 tasks)"),
]
for what, ours, peer, goal in rows:
    print("%-55s %10s %10s   goal %s" % (what, g(ours), g(peer) if peer else "-", goal))
for ev, b in (("eval", 64), ("eval-bird", 256)):
    k = "%s_gen" % ev
    for d in (0, 2048):
        ref = "b%d_d%d" % (b, d)
        if k in f and ref in f and f[ref] > 0:
            print("%-55s %9.0f%% %10s   goal >= 85%% (of bench at eval's batch and depth)" % ("%s generated tok/s (wall) / bench b%d depth %d" % (ev, b, d), 100 * f[k] / f[ref], "-"))
EOF
fi

if [ -n "$CUT" ]; then
	# Each stage once: "sanitize memcheck" and "sanitize racecheck" rerun as sanitize.
	again=$(echo "$CUT" | tr ' ' '\n' | grep -v -e '^$' -e '^memcheck$' -e '^racecheck$' | awk '!seen[$0]++' | tr '\n' ' ')
	note "== not run for lack of time: ${again% }; on the same warm machine (the checkpoint is kept in $WORK): GPU_CHECK_ONLY=\"${again% }\" bash scripts/gpu-check.sh"
fi
note "== done in $((SECONDS - T0)) s of the ${BUDGET}s budget: status $status; logs in $OUT"
exit $status
