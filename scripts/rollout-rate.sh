#!/usr/bin/env bash
# The rollout's decode rate against student bench's batched decode at the same batch (issue 28:
# on the CPU the rollout should decode at >= 90% of the bench's rate), in interleaved rounds:
#
#   scripts/rollout-rate.sh MODEL [BATCH]
#
# Each round runs one rollout of the bundled sample's first task, G = BATCH episodes of one turn
# of GEN tokens decoded together (a random checkpoint never stops, so every sequence decodes all
# of them), and reads its decode_step_tok_s: the tokens sampled in decode steps (every sequence
# feeding one token, no prompt chunk) over those steps' wall time, prefill excluded. Then
# student bench's batched decode of BATCH sequences, GEN tokens each, at the depth the rollout
# decoded at (its mean prompt length: prompt_tokens / episodes) and at depth 0 (8 tokens, the
# bench's default). It prints each round and the medians, and the ratios rollout / bench.
#
# Environment: STUDENT (default bin/student, built from this tree when absent), TOKENIZER
# (default ../shared/tokenizer/qwen2.5), DTYPE (q8), THREADS (every CPU), GEN (48), ROUNDS (3),
# SEED (1), TOP_P (0.95), OUT (a temporary directory: rollouts, profiles, JSON), PROFILE=1 to
# write CPU profiles (OUT/rollout-N.prof, OUT/bench-N.prof). Run it on a quiet machine: the
# ratio is of wall times.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/rollout-rate.sh MODEL [BATCH]}
batch=${2:-8}
student=${STUDENT:-bin/student}
tok=${TOKENIZER:-../shared/tokenizer/qwen2.5}
dtype=${DTYPE:-q8}
threads=${THREADS:-$(nproc)}
gen=${GEN:-48}
rounds=${ROUNDS:-3}
seed=${SEED:-1}
topp=${TOP_P:-0.95}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out/db"
rm -f "$out/roll.txt" "$out/bench-depth.txt" "$out/bench-0.txt"
if [[ ! -x $student ]]; then
	go build -o "$student" ./cmd/student
fi

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), threads $threads, batch $batch, gen $gen, dtype $dtype; out $out"
for r in $(seq "$rounds"); do
	prof=()
	[[ ${PROFILE:-} == 1 ]] && prof=(--cpuprofile "$out/rollout-$r.prof")
	"$student" rollout --model "$model" --tokenizer "$tok" --dtype "$dtype" --threads "$threads" \
		--tasks sample --db-root "$out/db" --limit 1 --group "$batch" --max-turns 1 --max-tokens "$gen" \
		--batch "$batch" --temperature 1 --top-p "$topp" --seed "$seed" --out "$out/rollout-$r.parquet" \
		"${prof[@]}" >"$out/rollout-$r.json" 2>"$out/rollout-$r.err"
	depth=$(jq '(.prompt_tokens / .episodes) | round' "$out/rollout-$r.json")
	for d in "$depth" 0; do
		prof=()
		[[ ${PROFILE:-} == 1 ]] && prof=(--cpuprofile "$out/bench-$r-d$d.prof")
		"$student" bench --model "$model" --dtype "$dtype" --threads "$threads" --prompt 0 --gen "$gen" \
			--batch "$batch" --depth "$d" --repeat 1 --json --quiet "${prof[@]}" >"$out/bench-$r-d$d.json"
	done
	roll=$(jq .decode_step_tok_s "$out/rollout-$r.json")
	steps=$(jq '"\(.decode_step_tokens) tokens in \(.decode_steps) steps"' -r "$out/rollout-$r.json")
	bd=$(jq .batch_decode_tok_s "$out/bench-$r-d$depth.json")
	b0=$(jq .batch_decode_tok_s "$out/bench-$r-d0.json")
	printf '%s\n' "$roll" >>"$out/roll.txt"
	printf '%s\n' "$bd" >>"$out/bench-depth.txt"
	printf '%s\n' "$b0" >>"$out/bench-0.txt"
	awk -v r="$r" -v roll="$roll" -v s="$steps" -v d="$depth" -v bd="$bd" -v b0="$b0" -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
		printf "round %d (load %s): rollout %.1f tok/s (%s); bench depth %d %.1f tok/s (ratio %.2f), depth 0 %.1f tok/s (ratio %.2f)\n",
			r, l, roll, s, d, bd, roll / bd, b0, roll / b0 }'
done
roll=$(median <"$out/roll.txt")
bd=$(median <"$out/bench-depth.txt")
b0=$(median <"$out/bench-0.txt")
awk -v roll="$roll" -v bd="$bd" -v b0="$b0" 'BEGIN {
	printf "median: rollout %.1f tok/s; bench at the rollout'\''s depth %.1f tok/s (ratio %.2f), at depth 0 %.1f tok/s (ratio %.2f)\n",
		roll, bd, roll / bd, b0, roll / b0 }'
