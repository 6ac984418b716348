#!/usr/bin/env bash
# The main job end to end on a fresh machine, without API keys: distil trajectories from the bundled
# sample benchmark on SQLite with the built-in oracle policy, curate them into a Parquet dataset with
# the student's tokenizer, verify the trainable-token masks, print the dataset statistics, and
# evaluate the oracle with the same agentic loop `student eval` uses for the student.
#
# Outputs go under ${DEMO_OUT:-runs/demo}/ (run dir, dataset, eval dir; runs/ is git-ignored). Rerunning resumes the
# distill run and rebuilds the dataset and eval. Real teachers: see teachers/example.yaml and run
#   bin/distill --config teachers.yaml --teachers gpt-oss,deepseek,glm,qwen --tasks sample
set -euo pipefail
cd "$(dirname "$0")/.."

out=${DEMO_OUT:-runs/demo}
shared=${CHAINEDSQL_SHARED:-../shared}
tok=${CHAINEDSQL_TOKENIZER:-$shared/tokenizer/qwen2.5}
if [ ! -f "$tok/tokenizer.json" ] && [ ! -f "$tok" ]; then
	echo "demo: no tokenizer at $tok (set CHAINEDSQL_TOKENIZER to a Qwen2.5 tokenizer.json or its directory)" >&2
	exit 1
fi

echo "== build"
mkdir -p bin
go build -o bin/ ./cmd/...

echo "== distill: sample benchmark, sqlite, oracle policy"
bin/distill --tasks sample --dialects sqlite --teachers oracle --out "$out/run" --progress log

echo "== curate build"
rm -rf "$out/dataset"
bin/curate build --tokenizer "$tok" --out "$out/dataset" "$out/run"

echo "== curate verify"
bin/curate verify --tokenizer "$tok" "$out/dataset"

echo "== curate stats"
bin/curate stats --plots "$out/plots" "$out/dataset"

echo "== student eval: the oracle policy through the agentic loop (the table student eval prints)"
rm -rf "$out/eval-oracle"
bin/student eval --policy oracle --tasks sample --out "$out/eval-oracle" --progress log

tiny=$shared/models/tiny-qwen2-f32
if [ -f "$tiny/config.json" ]; then
	echo "== student eval: the bundled Go runtime on a tiny random-weight Qwen2 (expect format violations)"
	rm -rf "$out/eval-tiny"
	bin/student eval --model "$tiny" --tokenizer "$tok" --tasks sample --limit 8 --max-tokens 32 \
		--out "$out/eval-tiny" --progress log
	bin/student compare "$out/eval-oracle" "$out/eval-tiny"
fi
echo "== done: $out/run, $out/dataset, $out/plots, $out/eval-*"
echo "   browse them: bin/curate view $out/dataset (or $out/run, or $out/eval-oracle $out/eval-tiny)"
