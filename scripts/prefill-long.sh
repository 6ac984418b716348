#!/usr/bin/env bash
# prefill-long.sh: CPU prefill speed at the prompt lengths `student eval` runs (schemas of
# 1,500-4,000 tokens, then each later turn after them), in rounds for a quiet machine: per round
# and weight type, llama.cpp's llama-bench over the prompt lengths (optional), then `student
# bench` for STUDENT and, optionally, a second binary BASE: one prefill per prompt length, and
# 512 tokens after DEPTH tokens already cached (llama.cpp c392e50 has no -d, so that cell is
# ours alone).
#
#   scripts/prefill-long.sh                                   # bin/student (built here), q8
#   BASE=/tmp/student-main LLAMA=/tmp/llama.cpp/build/bin DTYPES="q8 bf16 f32" scripts/prefill-long.sh
#
# Environment:
#   MODEL    Hugging Face checkpoint directory (default /tmp/q05b-bf16: the random 0.5B of
#            docs/BENCHMARKS.md; --dtype converts it at load)
#   STUDENT  student binary (default: go build -o bin/student ./cmd/student)
#   BASE     a second student binary, run right after STUDENT in every round (A/B)
#   LLAMA    llama.cpp's build/bin, for llama-bench -p PROMPTS -n 0 (its stderr passes through)
#   GGUF     prefix of the GGUF files for llama-bench: GGUF-q8_0.gguf, GGUF-bf16.gguf,
#            GGUF-f32.gguf (default /tmp/q05b)
#   DTYPES   weight types (default q8); PROMPTS (default "512 2048 4096"); DEPTH (default 2048);
#            ROUNDS (default 3); THREADS (default 2)
#
# Relative paths are taken from the repository's root (the script runs there). Prints one line
# per round, weight type and program: prefill tok/s per prompt length (pP=...), and for the
# students p512@DEPTH. Name the CPU family with the figures; run it with
# nothing else on the machine (docs/BENCHMARKS.md, "Prefill attention through the decode
# kernels").
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-/tmp/q05b-bf16}
GGUF=${GGUF:-/tmp/q05b}
DTYPES=${DTYPES:-q8}
PROMPTS=${PROMPTS:-512 2048 4096}
DEPTH=${DEPTH:-2048}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
if [ -z "${STUDENT:-}" ]; then
	go build -o bin/student ./cmd/student
	STUDENT=bin/student
fi
rate() { python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["prefill_tok_s"])'; }
for r in $(seq 1 "$ROUNDS"); do
	for dt in $DTYPES; do
		echo "round $r, $dt, $(date -u +%T) UTC, load $(cut -d' ' -f1 /proc/loadavg)"
		if [ -n "${LLAMA:-}" ]; then
			q=$dt
			[ "$dt" = q8 ] && q=q8_0
			"$LLAMA/llama-bench" -m "$GGUF-$q.gguf" -t "$THREADS" -p "$(echo $PROMPTS | tr ' ' ,)" -n 0 -r 1 -o json |
				python3 -c 'import json,sys; print("  llama.cpp", " ".join("p%d=%.1f" % (r["n_prompt"], r["avg_ts"]) for r in json.load(sys.stdin)))'
		fi
		bins=("$STUDENT")
		[ -n "${BASE:-}" ] && bins+=("$BASE")
		for bin in "${bins[@]}"; do
			line="  $bin"
			for p in $PROMPTS; do
				line="$line p$p=$("$bin" bench --model "$MODEL" --dtype "$dt" --threads "$THREADS" --prompt "$p" --gen 0 --repeat 1 --json --quiet | rate)"
			done
			line="$line p512@$DEPTH=$("$bin" bench --model "$MODEL" --dtype "$dt" --threads "$THREADS" --prompt 512 --depth "$DEPTH" --gen 0 --repeat 1 --json --quiet | rate)"
			echo "$line"
		done
	done
done
