#!/usr/bin/env bash
# decode-depth.sh: CPU decode speed at depth 0 and 2,048 (issue 30), in one go, for a quiet
# machine: `student bench --depth D --paired` per weight type and depth (depth 0 and depth D
# decoded in turns in one process, one token each: the depth ratio is the median of the per-pair
# ratios, which a loaded machine moves far less than two separate runs), rounds interleaved,
# optionally against a second student binary (BASE, e.g. main's; one that has no --paired falls
# back to separate runs, PAIRED=0 forces them) and llama.cpp's llama-bench at depth 0.
#
#   scripts/decode-depth.sh                      # bin/student (built here), q8 bf16 f32, depths 0 2048
#   BASE=/tmp/student-main scripts/decode-depth.sh
#   LLAMA=/tmp/llama.cpp/build/bin GGUF=/tmp/q05b scripts/decode-depth.sh
#
# Environment:
#   MODEL    Hugging Face checkpoint directory (default /tmp/q05b-bf16: the random 0.5B of
#            docs/BENCHMARKS.md; --dtype converts it to q8 and f32 at load)
#   STUDENT  student binary (default: go build -o bin/student ./cmd/student)
#   NICE     niceness of the runs (default 0; 10 on a shared machine)
#   BASE     a second student binary, run right after STUDENT in every cell (A/B)
#   ARGS, BASE_ARGS  extra `student bench` flags for STUDENT and for BASE (e.g. ARGS="--kv bf16"
#            BASE_ARGS="--kv f32" with BASE=$STUDENT: one binary, two settings; name both, as
#            the cache's default depends on the weight type: bf16 for q8, f32 otherwise, and a
#            binary before caff952 holds q8 over f32 unless told); they join the binary's name in
#            the output, spaces as underscores (each run's JSON names its kv_cache)
#   LLAMA    llama.cpp's build/bin: llama-bench -p 0 -n GEN at depth 0 (c392e50 has no -d) before
#            each round's student runs of that weight type
#   GGUF     prefix of the GGUF files for llama-bench: GGUF-q8_0.gguf, GGUF-bf16.gguf,
#            GGUF-f32.gguf (default /tmp/q05b)
#   DTYPES   weight types (default "q8 bf16 f32"); DEPTHS (default "0 2048": paired, each depth
#            D > 0 is one run that also measures depth 0; "0" alone: plain runs); ROUNDS (default 2);
#   GEN      decode tokens per run (default 64); THREADS (default 2); OUT (default a new /tmp dir)
#   ROOFLINE 1 (default): every student run also measures the read bandwidth (--roofline), printed
#            last on its lines and summarised at the end, so each round's ratios come with the
#            state of the host's memory (a host whose memory swings between a fast and a slow
#            state moves llama.cpp and us differently: docs/BENCHMARKS.md, issue 30); with
#            LLAMA, each llama-bench run gets a read pass before and after it too (STUDENT's
#            `bench --read-passes 1`), and the summary pairs each round's llama.cpp run with
#            ours, each with its read bandwidth and roofline, and gives the ratio over the pairs
#            whose two reads agree within 15% (one state of the memory); 0: not
#   PROFILE  1: also write each student run's CPU profile to OUT (--cpuprofile), whose decode CPU
#            time (`go tool pprof -top -cum BIN PROF | grep 'fill).decode'`) a loaded machine
#            changes less than the wall-clock rate
#
# Every run's JSON goes to OUT; the script prints one line per depth measured (with the load
# average and, for a paired depth D, the run's depth ratio) and, at the end, per binary, weight
# type and depth the median decode tok/s, depth D against depth 0 (the median of the paired
# runs' ratios; the ratio of the medians where not paired), and ours against llama.cpp. Run it
# with nothing else on the machine: on a shared one the tok/s figures are noise, the paired
# ratio less so (docs/BENCHMARKS.md, issue 30).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-/tmp/q05b-bf16}
DTYPES=${DTYPES:-q8 bf16 f32}
DEPTHS=${DEPTHS:-0 2048}
ROUNDS=${ROUNDS:-2}
GEN=${GEN:-64}
THREADS=${THREADS:-2}
GGUF=${GGUF:-/tmp/q05b}
OUT=${OUT:-$(mktemp -d /tmp/decode-depth.XXXXXX)}
mkdir -p "$OUT"
if [[ -z ${STUDENT:-} ]]; then
	go build -o bin/student ./cmd/student
	STUDENT=bin/student
fi
bins=("$STUDENT")
binargs=("${ARGS:-}")
[[ -n ${BASE:-} ]] && bins+=("$BASE") && binargs+=("${BASE_ARGS:-}")
[[ -d $MODEL ]] || { echo "decode-depth: no checkpoint at MODEL=$MODEL" >&2; exit 1; }

load() { cut -d' ' -f1 /proc/loadavg; }
# lines JSON "ROUND DTYPE" DEPTH NAME LOAD: a run's lines of runs.txt (a paired run: depth 0 and
# depth D, with the depth ratio).
lines='
import json, sys
j = json.load(open(sys.argv[1]))
pre, d, name, load = sys.argv[2:]
ts, d0, ratio = j["decode_tok_s"], j.get("decode_d0_tok_s"), j.get("depth_ratio")
rg = j.get("read_gb_s")
read = f"{rg:.1f}" if rg else "-"
if j.get("paired"):
    print(f"{pre} 0 {name} {d0:.2f} {load} - {read}")
    print(f"{pre} {d} {name} {ts:.2f} {load} {ratio:.3f} {read}")
else:
    print(f"{pre} {d} {name} {ts:.2f} {load} - {read}")
'
echo "# $(date -u +%FT%TZ) model $MODEL threads $THREADS gen $GEN; out $OUT"
paired=()
for d in $DEPTHS; do [[ $d != 0 ]] && paired+=("$d"); done
# binpaired[i]: whether bins[i] runs paired: its bench has --paired (a BASE built before it has
# not), there is a depth to pair and PAIRED is not 0.
binpaired=()
for b in "${bins[@]}"; do
	h=$("$b" bench -h 2>&1 || true)
	p=0
	[[ ${PAIRED:-1} == 1 && ${#paired[@]} -gt 0 && $h == *-paired* ]] && p=1
	binpaired+=("$p")
done
# probe: llama.cpp's runs too get read passes around them (STUDENT's --read-passes), so that each
# llama.cpp run's memory state is known as ours is.
probe=0
[[ -n ${LLAMA:-} && ${ROOFLINE:-1} == 1 && $("$STUDENT" bench -h 2>&1 || true) == *-read-passes* ]] && probe=1
echo "# round dtype depth binary decode_tok_s load depth_ratio read_gb_s"
for r in $(seq 1 "$ROUNDS"); do
	for dt in $DTYPES; do
		if [[ -n ${LLAMA:-} ]]; then
			g=$GGUF-$dt.gguf
			[[ $dt == q8 ]] && g=$GGUF-q8_0.gguf
			f=$OUT/r$r-$dt-d0-llama.json
			[[ $probe == 1 ]] && nice -n "${NICE:-0}" "$STUDENT" bench --read-passes 1 --threads "$THREADS" --json >"${f%.json}-read0.json"
			nice -n "${NICE:-0}" "$LLAMA/llama-bench" -m "$g" -t "$THREADS" -p 0 -n "$GEN" -r 1 -o json >"$f" 2>/dev/null
			read=-
			if [[ $probe == 1 ]]; then
				nice -n "${NICE:-0}" "$STUDENT" bench --read-passes 1 --threads "$THREADS" --json >"${f%.json}-read1.json"
				read=$(python3 -c 'import json,sys; print(round(max(json.load(open(a))["read_gb_s"] for a in sys.argv[1:]), 1))' "${f%.json}-read0.json" "${f%.json}-read1.json")
			fi
			ts=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))[0]["avg_ts"], 2))' "$f")
			echo "$r $dt 0 llama.cpp $ts $(load) - $read"
		fi
		for i in "${!bins[@]}"; do
			b=${bins[$i]}
			a=${binargs[$i]}
			name=$b
			[[ -n $a ]] && name="$b[${a// /_}]"
			depths=$DEPTHS pair=()
			[[ ${binpaired[$i]} == 1 ]] && depths=${paired[*]} pair=(--paired)
			for d in $depths; do
				f=$OUT/r$r-$dt-d$d-bin$i.json
				prof=()
				[[ ${PROFILE:-} == 1 ]] && prof=(--cpuprofile "${f%.json}.prof")
				[[ ${ROOFLINE:-1} == 1 ]] && prof+=(--roofline)
				# shellcheck disable=SC2086 # a: flags split on purpose
				nice -n "${NICE:-0}" "$b" bench "${prof[@]}" $a --model "$MODEL" --dtype "$dt" --threads "$THREADS" --prompt 0 --gen "$GEN" \
					--repeat 1 --depth "$d" "${pair[@]}" --json --quiet >"$f"
				python3 -c "$lines" "$f" "$r $dt" "$d" "$name" "$(load)"
			done
		done
	done
done | tee "$OUT/runs.txt"

name0=$STUDENT
[[ -n ${ARGS:-} ]] && name0="$STUDENT[${ARGS// /_}]"
python3 - "$OUT/runs.txt" "$OUT" "$name0" <<'EOF'
import glob, json, statistics, sys
cells, ratios, reads = {}, {}, {}
runs = {}  # (round, dtype, binary) -> (depth 0 tok/s, read GB/s or None)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    rnd, dt, d, b, ts, _, *rest = line.split()
    if int(d) == 0:
        runs[(rnd, dt, b)] = (float(ts), float(rest[1]) if len(rest) > 1 and rest[1] != "-" else None)
    cells.setdefault((b, dt, int(d)), []).append(float(ts))
    if rest and rest[0] != "-":
        ratios.setdefault((b, dt, int(d)), []).append(float(rest[0]))
    if len(rest) > 1 and rest[1] != "-" and int(d) == 0 and b != "llama.cpp":
        reads.setdefault(int(rnd), []).append(float(rest[1]))
med = {k: statistics.median(v) for k, v in cells.items()}
print("# medians: binary dtype depth tok/s (runs) [depth/depth0: paired median ratio (runs) or ratio of medians] [/llama.cpp depth 0]")
for (b, dt, d), m in sorted(med.items()):
    extra = ""
    if (b, dt, d) in ratios:
        rs = ratios[(b, dt, d)]
        extra += f" depth/d0 {statistics.median(rs):.3f} paired ({', '.join(f'{x:.3f}' for x in rs)})"
    elif d and (b, dt, 0) in med:
        extra += f" depth/d0 {m / med[(b, dt, 0)]:.2f}"
    if b != "llama.cpp" and ("llama.cpp", dt, 0) in med:
        extra += f" vs llama.cpp d0 {m / med[('llama.cpp', dt, 0)]:.2f}x"
    print(f"{b} {dt} {d} {m:.2f} ({', '.join(str(x) for x in cells[(b, dt, d)])}){extra}")
if reads:
    print("# read bandwidth of the student runs (--roofline), GB/s per round: "
          + "; ".join(f"round {r} {min(v):.1f}-{max(v):.1f}" for r, v in sorted(reads.items())))
# Each round's llama.cpp run against STUDENT's depth 0 run of the same weight type, each with the
# read bandwidth measured around it and its roofline: decode GB/s (tok/s times the weight bytes
# a token streams: llama.cpp's q8_0, with f16 scales, 34 bytes per 32 weights of the run's
# decode_weights_per_token; ours the run's decode_bytes_per_token, which a binary without the
# weights count gives as 36 per 32 for q8) against
# that read bandwidth. Where the two reads differ by more than 15% the two runs met different
# states of the host's memory, and their ratio is the host's, not the programs'.
perTok, peerTok = {}, {}
for f in glob.glob(sys.argv[2] + "/r*-d*-bin0.json"):
    j = json.load(open(f))
    perTok[j["dtype"]] = j["decode_bytes_per_token"]
    n = j.get("decode_weights_per_token") or j["decode_bytes_per_token"] * 32 // 36
    peerTok[j["dtype"]] = n * 34 // 32 if j["dtype"] == "q8" else j["decode_bytes_per_token"]
pairs = [(k[0], k[1], runs[k], runs.get((k[0], k[1], sys.argv[3]))) for k in sorted(runs) if k[2] == "llama.cpp"]
if any(l[1] for _, _, l, _ in pairs):
    print("# pairs: round dtype | llama.cpp tok/s read GB/s roofline | ours tok/s read GB/s roofline | ours/llama.cpp | same state (reads within 15%)")
    same = {}
    for rnd, dt, (lt, lr), o in pairs:
        if not o or not lr or not o[1]:
            continue
        ot, orr = o
        pt = perTok.get(dt)
        lroof = oroof = "-"
        if pt:
            lb = peerTok[dt]
            lroof, oroof = f"{100 * lt * lb / 1e9 / lr:.0f}%", f"{100 * ot * pt / 1e9 / orr:.0f}%"
        ok = abs(lr - orr) <= 0.15 * max(lr, orr)
        if ok:
            same.setdefault(dt, []).append(ot / lt)
        print(f"{rnd} {dt} | {lt:.2f} {lr:.1f} {lroof} | {ot:.2f} {orr:.1f} {oroof} | {ot / lt:.2f}x | {'yes' if ok else 'no'}")
    for dt, v in same.items():
        print(f"# {dt}: ours/llama.cpp over the pairs in one state: median {statistics.median(v):.2f}x ({', '.join(f'{x:.2f}' for x in v)})")
EOF
