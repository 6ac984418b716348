#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU (issue 15), in one run of about 10 minutes on
# an H200:
#   1. the parity tests of inference/cuda on the real device (the tests the emulator runs under
#      -tags cudaemu elsewhere), cuBLAS's prefill against the own kernels, and the products with
#      cuBLAS switched off;
#   2. (first) a random Qwen2.5-0.5B checkpoint (bf16), written by qwen2's benchmark writer, which
#      the parity tests also compare with the CPU backend (TestCheckpointAgainstCPU);
#   3. the benchmarks: batch-1 decode, batched decode at 8/32/128, top-p decode, decode with
#      logits copied back (the generate path), 512-token prefill;
#   4. a BIRD-layout eval (the bundled sample benchmark written as dev.json + dev_databases)
#      of that checkpoint through student eval --backend cuda, when a tokenizer is at hand;
#   5. Hugging Face transformers on the same checkpoint (model built from its config.json, no
#      download), where torch and transformers are installed.
# Everything goes to $OUT (default /tmp/gpu-check); summary.txt collects the figures.
# Env: CHAINEDSQL_SHARED (shared test data: the tiny checkpoint and the Qwen2.5 tokenizer;
# ./shared or ../shared are found by themselves), GPU_CHECK_CKPT (a checkpoint directory to
# reuse), GPU_CHECK_SKIP (words among parity, bench, eval, hf).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
skip() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
if [ -z "${CHAINEDSQL_SHARED:-}" ] && [ -d shared ]; then
	export CHAINEDSQL_SHARED=$PWD/shared
fi
SHARED=${CHAINEDSQL_SHARED:-$(cd .. && pwd)/shared}
status=0

note "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$SUMMARY" || true
note "$(go version)"
go build -o "$OUT/student" ./cmd/student || exit 1

# The random 0.5B checkpoint (the parity tests use it too).
CKPT=${GPU_CHECK_CKPT:-$OUT/q05b-bf16}
if [ ! -f "$CKPT/model.safetensors" ]; then
	note "== writing the random Qwen2.5-0.5B checkpoint to $CKPT"
	CHAINEDSQL_BENCH_05B=$CKPT go test -count=1 -run '^$' -bench 'Load/stored' -benchtime 1x ./inference/qwen2 >"$OUT/ckpt.txt" 2>&1 || { note "writing the checkpoint failed (ckpt.txt)"; exit 1; }
fi

# 1. Parity on the device.
if ! skip parity; then
	note "== parity tests on the device (CHAINEDSQL_CUDA_TEST=cuda)"
	if CHAINEDSQL_CUDA_TEST=cuda CHAINEDSQL_CUDA_PARITY_MODEL=$CKPT go test -count=1 -v -timeout 8m ./inference/cuda >"$OUT/parity.txt" 2>&1; then
		note "parity: PASS ($(grep -c '^--- PASS' "$OUT/parity.txt") passed, $(grep -c '^--- SKIP' "$OUT/parity.txt") skipped)"
	else
		note "parity: FAIL"
		grep -E '^(--- FAIL|\s+\S+_test.go)' "$OUT/parity.txt" | head -20 | tee -a "$SUMMARY"
		status=1
	fi
	grep -E 'max abs error|device:|differ from the CPU' "$OUT/parity.txt" | sed 's/^ *//' | tee -a "$SUMMARY"
	grep -E 'cuBLAS and own kernels differ' "$OUT/parity.txt" | sed 's/^ *//' | tee -a "$SUMMARY"
	# The model tests compare with the CPU on the own kernels; TestBLASPrefill and
	# TestMatMulBLAS take cuBLAS where it loaded. Without it, the prefill product falls back to
	# the tiled kernel:
	if CHAINEDSQL_CUDA_CUBLAS=off CHAINEDSQL_CUDA_TEST=cuda go test -count=1 -timeout 4m -run 'MatMul' ./inference/cuda >"$OUT/parity-nocublas.txt" 2>&1; then
		note "products without cuBLAS (own GEMM kernel): PASS"
	else
		note "parity without cuBLAS: FAIL (see parity-nocublas.txt)"
		status=1
	fi
fi

# 3. Benchmarks.
if ! skip bench; then
	note "== benchmarks (random 0.5B, bf16; tok/s)"
	CHAINEDSQL_CUDA_TEST=cuda CHAINEDSQL_CUDA_BENCH_MODEL=$CKPT go test -count=1 -timeout 6m -run '^$' -bench . -benchtime 3x ./inference/cuda >"$OUT/bench.txt" 2>&1 || status=1
	grep -E '^Benchmark' "$OUT/bench.txt" | awk '{print $1, $(NF-1), $NF}' | tee -a "$SUMMARY"
	grep -m1 ' on ' "$OUT/bench.txt" | sed 's/^ *//' | tee -a "$SUMMARY"
fi

# 4. A BIRD-layout eval through the built binary.
TOK=""
for d in "$SHARED/tokenizer/qwen2.5" "$CKPT"; do
	[ -f "$d/tokenizer.json" ] && TOK=$d && break
done
if ! skip eval && [ -n "$TOK" ] && command -v python3 >/dev/null; then
	note "== student eval --backend cuda, BIRD layout (the 56 sample questions), random 0.5B"
	BIRD=$OUT/bird
	python3 - "$BIRD" <<'EOF'
import json, os, sqlite3, sys
out = sys.argv[1]
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
        "SQL": q["gold"]["sqlite"], "difficulty": q.get("difficulty", "simple")} for i, q in enumerate(qs)]
json.dump(dev, open(os.path.join(out, "dev.json"), "w"), indent=1)
EOF
	rm -rf "$OUT/eval"
	start=$(date +%s.%N)
	if "$OUT/student" eval --model "$CKPT" --tokenizer "$TOK" --tasks "bird:$BIRD/dev.json" --backend cuda \
		--batch 56 --max-tokens 256 --progress log --out "$OUT/eval" >"$OUT/eval.txt" 2>&1; then
		end=$(date +%s.%N)
		note "eval: $(python3 -c "print(f'{$end-$start:.1f}')") s wall for 56 tasks"
		python3 - "$OUT/eval/usage.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
u = json.load(open(sys.argv[1]))
def find(o):
    if isinstance(o, dict):
        if "generated" in o and "forwards" in o:
            return o
        for v in o.values():
            r = find(v)
            if r: return r
    return None
c = find(u)
if c:
    print("eval generator: %d requests, %d prompt tokens (%d from cache), %d generated, %d forwards, max batch %d" % (
        c["requests"], c["prompt_tokens"], c["cached_tokens"], c["generated"], c["forwards"], c["max_batch_seen"]))
EOF
		tail -12 "$OUT/eval.txt" >>"$SUMMARY"
	else
		note "eval: FAIL (eval.txt)"
		tail -5 "$OUT/eval.txt" | tee -a "$SUMMARY"
		status=1
	fi
else
	note "== eval skipped (no tokenizer.json under $SHARED/tokenizer/qwen2.5, or no python3, or GPU_CHECK_SKIP)"
fi

# 5. Hugging Face transformers on the same checkpoint.
if ! skip hf && python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
	note "== Hugging Face transformers, same checkpoint (bf16, greedy; tok/s)"
	timeout 240 python3 - "$CKPT" <<'EOF' 2>"$OUT/hf.err" | tee -a "$SUMMARY"
import sys, time, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
d = sys.argv[1]
cfg = AutoConfig.from_pretrained(d)
m = AutoModelForCausalLM.from_pretrained(d, config=cfg, torch_dtype=torch.bfloat16).cuda().eval()
print("transformers", transformers.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
V = cfg.vocab_size
def decode(batch, steps=64):
    ids = torch.randint(0, V, (batch, 32), device="cuda")
    m.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)  # warm-up
    torch.cuda.synchronize(); t = time.time()
    m.generate(ids, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return batch * steps / (time.time() - t)
for b in (1, 8, 32, 128):
    print(f"hf decode batch={b} {decode(b):.1f} tok/s")
ids = torch.randint(0, V, (1, 512), device="cuda")
with torch.no_grad():
    m(ids); torch.cuda.synchronize(); t = time.time()
    for _ in range(3): m(ids)
    torch.cuda.synchronize()
print(f"hf prefill 512 {3 * 512 / (time.time() - t):.1f} tok/s")
EOF
else
	note "== transformers not installed (or no CUDA torch): no side-by-side figures"
fi
note "== done: status $status; files in $OUT"
exit $status
