#!/usr/bin/env bash
# Scale-out on a real Slurm cluster (docs/SCALE-OUT.md). Installs Debian's slurm-wlm and munge
# when missing, brings up a one-node cluster on localhost (munged, slurmctld, slurmd; key, config,
# state and logs in a temporary directory; stopped on exit), and submits the sbatch templates of
# docs/examples as they ship, overriding only --array, --cpus-per-task and --mem on the command
# line and the templates' variables in the environment:
#   1. distill: a 4-task array of distill-array.sbatch over the bundled sample (oracle + a scripted
#      OpenAI-compatible teacher), curate build of the 4 shard dirs as a job that depends on the
#      array: the same rows as an unsharded run, row for row;
#   2. eval: a 4-task array of eval-array.sbatch of the tiny random-weight Qwen2 checkpoint, student
#      merge as a dependent job: results and predictions byte-identical to a single run's;
#   3. resume: the distill array again with a slower teacher; array task 1 is cancelled with
#      scancel (SIGTERM: distill drains) and task 2's distill killed with SIGKILL mid-run; both
#      indexes are resubmitted, resume their run dirs, and the dataset is again the unsharded run's.
# Exits 0 only when all three hold. Must run as root (apt-get; slurmd starts jobs as their user).
# E2E_KEEP=1 keeps the temporary directory; it is kept anyway when a check fails.
# --if-installable (for CI): exit 0 with a note, running nothing, where Debian's slurm-wlm cannot
# be installed (no apt-get, or no such package after apt-get update).
set -euo pipefail
cd "$(dirname "$0")/.."
if_installable=""
case "${1:-}" in
--if-installable) if_installable=1 ;;
"") ;;
*) echo "usage: bash scripts/slurm-e2e.sh [--if-installable]" >&2; exit 2 ;;
esac
repo=$PWD
shared=${CHAINEDSQL_SHARED:-$repo/../shared}
tok=${CHAINEDSQL_TOKENIZER:-$shared/tokenizer/qwen2.5}
tiny=$shared/models/tiny-qwen2-f32
N=4           # array tasks (shards, eval parts)
EVAL_LIMIT=24 # tasks of the sample the eval covers
WAIT=${E2E_WAIT:-120} # seconds any one wait may take

say() { printf '== %s\n' "$*"; }
die() { printf 'slurm-e2e: FAIL: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if [ -n "$if_installable" ] && ! command -v sbatch >/dev/null; then
	if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ] ||
		{ ! apt-cache show slurm-wlm >/dev/null 2>&1 && { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null 2>&1 || true; } &&
			! apt-cache show slurm-wlm >/dev/null 2>&1; }; then
		echo "slurm-e2e: skipped: Debian's slurm-wlm cannot be installed here (no apt-get, not root, or no such package)"
		exit 0
	fi
fi
[ "$(id -u)" = 0 ] || die "run as root: it installs Debian packages and runs slurmd, which starts jobs as their user"
[ -f "$tok/tokenizer.json" ] || [ -f "$tok" ] || die "no tokenizer at $tok (set CHAINEDSQL_TOKENIZER or CHAINEDSQL_SHARED)"
[ -f "$tiny/config.json" ] || die "no tiny checkpoint at $tiny (set CHAINEDSQL_SHARED)"
t_all=$(now)

tmp=$(mktemp -d /tmp/slurm-e2e.XXXXXX)
chmod 755 "$tmp" # munged wants every directory above its socket searchable by all
policy_rc_made=""
pids=()
cleanup() {
	local rc=$?
	set +e
	if [ -n "$policy_rc_made" ]; then rm -f /usr/sbin/policy-rc.d; fi
	if [ -n "${SLURM_CONF:-}" ] && [ -f "$tmp/slurmctld.pid" ]; then
		local jobs
		jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u)
		if [ -n "$jobs" ]; then
			# shellcheck disable=SC2086 # a list of job ids
			timeout 10 scancel $jobs
			for _ in $(seq 1 20); do
				[ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
				sleep 0.5
			done
		fi
	fi
	if [ "$rc" != 0 ]; then
		for f in "$tmp"/log/slurmctld.log "$tmp"/log/slurmd.log "$tmp"/work/*.log "$tmp"/log/teacher*.log; do
			[ -f "$f" ] || continue
			printf -- '---- %s (last 40 lines)\n' "$f" >&2
			tail -n 40 "$f" >&2
		done
	fi
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	[ -f "$tmp/munge/munged.pid" ] && kill "$(cat "$tmp/munge/munged.pid")" 2>/dev/null
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	# Anything still working in the temporary directory is a job step of this cluster.
	local try
	for try in 1 2 3 4 5 6 7 8 9 10; do
		local left=()
		for p in /proc/[0-9]*; do
			case "$(readlink "$p/cwd" 2>/dev/null)" in "$tmp"/*) left+=("${p#/proc/}") ;; esac
		done
		[ -f "$tmp/munge/munged.pid" ] && kill -0 "$(cat "$tmp/munge/munged.pid")" 2>/dev/null && left+=("$(cat "$tmp/munge/munged.pid")")
		[ ${#left[@]} = 0 ] && break
		if [ "$try" = 10 ]; then
			echo "slurm-e2e: killing leftover processes ${left[*]}" >&2
			kill -9 "${left[@]}" 2>/dev/null
		else
			kill "${left[@]}" 2>/dev/null
			sleep 0.5
		fi
	done
	if [ "$rc" = 0 ] && [ -z "${E2E_KEEP:-}" ]; then
		rm -rf "$tmp"
	else
		echo "slurm-e2e: state, logs and outputs kept in $tmp" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "install: slurm-wlm, munge, jq (Debian) when missing"
t0=$(now)
missing=()
command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null && command -v mungekey >/dev/null || missing+=(munge)
command -v jq >/dev/null || missing+=(jq)
if [ ${#missing[@]} -gt 0 ]; then
	# Keep the packages' maintainer scripts from starting system daemons (Debian's policy-rc.d
	# convention); the file is removed again right after, or by the exit trap.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && policy_rc_made=1
	fi
	apt_install() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"; }
	apt_install >"$tmp/apt.log" 2>&1 || { apt-get -o DPkg::Lock::Timeout=600 update -q >>"$tmp/apt.log" 2>&1 && apt_install >>"$tmp/apt.log" 2>&1; } ||
		{ tail -n 20 "$tmp/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
	if [ -n "$policy_rc_made" ]; then rm -f /usr/sbin/policy-rc.d && policy_rc_made=""; fi
fi
echo "installed ${missing[*]:-nothing} in $(since "$t0") s ($(slurmctld -V))"

say "build: bin/distill, bin/curate, bin/student, the test-only e2etool"
t0=$(now)
mkdir -p bin "$tmp/bin"
go build -o bin/ ./cmd/...
go build -o "$tmp/bin/e2etool" ./internal/e2etool
echo "built in $(since "$t0") s"
export PATH="$repo/bin:$PATH"

say "cluster: munged, slurmctld, slurmd on localhost, state in $tmp"
t0=$(now)
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/work" "$tmp/runs" "$tmp/evals"
mungekey --create --keyfile="$tmp/munge/munge.key" 2>"$tmp/log/mungekey.log" || die "mungekey: $(cat "$tmp/log/mungekey.log")"
munged --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/socket" --pid-file="$tmp/munge/munged.pid" \
	--log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed" || die "munged did not start: $(tail -n 5 "$tmp/log/munged.log")"
munge -n -S "$tmp/munge/socket" | unmunge -S "$tmp/munge/socket" >/dev/null || die "munge credentials do not round-trip"

# Two free TCP ports (nothing accepts a connection on them), outside the kernel's ephemeral
# range: a port inside it can be taken as the local end of an outgoing connection (the daemons'
# own, between this check and their bind), which failed a run with "Address already in use".
read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { eph_lo=32768; eph_hi=60999; }
free_port() {
	local p
	for _ in $(seq 1 100); do
		if [ "$eph_lo" -gt 11024 ]; then
			p=$((10000 + RANDOM % (eph_lo - 10000)))
		else
			p=$((eph_hi + 1 + RANDOM % (65535 - eph_hi)))
		fi
		if [ "$p" != "${1:-}" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free TCP port found"
}
ctld_port=$(free_port)
slurmd_port=$(free_port "$ctld_port")
mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
cat >"$tmp/slurm.conf" <<EOF
# One-node cluster of scripts/slurm-e2e.sh.
ClusterName=e2e
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups on this machine: processes tracked through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
# scancel: SIGTERM, then SIGKILL after 5 s (the default is 30).
KillWait=5
# Finished jobs stay visible to scontrol for the checks.
MinJobAge=3600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=$mem State=UNKNOWN
PartitionName=e2e Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
deadline=$((SECONDS + 30))
until [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ]; do
	[ $SECONDS -lt $deadline ] || die "the node did not come up idle in 30 s (sinfo: $(sinfo -h -o '%T %E' 2>&1))"
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || die "a Slurm daemon exited: $(tail -n 5 "$tmp"/log/*.out)"; done
	sleep 0.3
done
echo "cluster up in $(since "$t0") s: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %T')"

say "teachers: scripted OpenAI-compatible servers (100 ms and 400 ms per reply)"
start_teacher() { # NAME DELAY
	"$tmp/bin/e2etool" teacher --url-file "$tmp/$1.url" --delay "$2" >"$tmp/log/$1.log" 2>&1 &
	pids+=($!)
	local pid=$!
	for _ in $(seq 1 100); do
		[ -s "$tmp/$1.url" ] && break
		kill -0 "$pid" 2>/dev/null || die "teacher $1 exited: $(cat "$tmp/log/$1.log")"
		sleep 0.1
	done
	[ -s "$tmp/$1.url" ] || die "teacher $1 wrote no URL in 10 s"
	# The same teacher name and model for both, so their trajectories are the same rows.
	cat >"$tmp/$1.yaml" <<EOF
teachers:
  scripted:
    base_url: $(cat "$tmp/$1.url")
    model: scripted-teacher
    api_key_env: ""
    max_concurrency: 4
    max_retries: 2
EOF
}
start_teacher teacher 100ms
start_teacher teacher-slow 400ms

# submit ARGS...: sbatch from the work directory (job logs land there); prints the job id.
submit() {
	local out
	out=$(cd "$tmp/work" && sbatch --parsable "$@" 2>&1) || die "sbatch $*: $out"
	echo "${out%%;*}"
}
# state JOB: the JobState of every task of a job, one per line ("PENDING" for unsplit tasks).
states() { scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_done JOB: until no task of the job is pending or running, at most $WAIT s.
wait_done() {
	local deadline=$((SECONDS + WAIT)) s
	while :; do
		s=$(squeue -h -j "$1" -o %T 2>/dev/null) || s="?"
		[ -z "$s" ] && return 0
		[ $SECONDS -lt $deadline ] || die "job $1 still $(echo "$s" | sort | uniq -c | tr -s ' \n' ' ') after $WAIT s"
		sleep 0.3
	done
}
# expect_completed JOB WHAT: every task of the job completed with exit code 0.
expect_completed() {
	local bad
	bad=$(scontrol -o show job "$1" | grep -v 'JobState=COMPLETED .* ExitCode=0:0' || true)
	[ -z "$bad" ] || die "$2: job $1 has tasks that did not complete: $(echo "$bad" | grep -o 'JobId=[0-9]* ArrayJobId=[0-9]* ArrayTaskId=[0-9]*\|JobState=[A-Z_]*\|ExitCode=[0-9:]*' | tr '\n' ' ')"
}
journal_lines() { if [ -f "$1/journal" ]; then wc -l <"$1/journal"; else echo 0; fi; }

export TEACHERS=oracle,scripted TASKS=sample DIALECTS=sqlite SHARDS=$N
distill_array="$repo/docs/examples/distill-array.sbatch"
eval_array="$repo/docs/examples/eval-array.sbatch"
shards_of() { for i in $(seq 0 $((N - 1))); do printf '%s ' "$1/shard-$i"; done; }

say "scenario 1: distill as a $N-task array, curate build as a dependent job"
t1=$(now)
bin/distill --config "$tmp/teacher.yaml" --teachers "$TEACHERS" --tasks sample --dialects sqlite \
	--out "$tmp/runs/single" --progress off >"$tmp/log/single-distill.log" 2>&1 ||
	die "unsharded distill: $(cat "$tmp/log/single-distill.log")"
curate build --tokenizer "$tok" --out "$tmp/ds-single" "$tmp/runs/single" >"$tmp/log/single-curate.log" 2>&1 ||
	die "curate build of the unsharded run: $(cat "$tmp/log/single-curate.log")"
"$tmp/bin/e2etool" rows "$tmp/ds-single" >"$tmp/rows-single.jsonl"
rows=$(wc -l <"$tmp/rows-single.jsonl")
[ "$rows" -gt 0 ] || die "the unsharded dataset has no rows"
keys=$(journal_lines "$tmp/runs/single")
t_single=$(since "$t1")
t1=$(now)
jid=$(TEACHERS_CONFIG="$tmp/teacher.yaml" RUNS="$tmp/runs/sharded" submit --array=0-$((N - 1)) --cpus-per-task=1 --mem=1G "$distill_array")
cid=$(submit --dependency=afterok:"$jid" --job-name=curate --mem=1G --wrap "curate build --tokenizer $tok --out $tmp/ds-sharded $(shards_of "$tmp/runs/sharded")")
wait_done "$jid"
expect_completed "$jid" "distill array"
wait_done "$cid"
expect_completed "$cid" "curate build job"
"$tmp/bin/e2etool" rows "$tmp/ds-sharded" >"$tmp/rows-sharded.jsonl"
per_shard=""
total=0
for i in $(seq 0 $((N - 1))); do
	n=$(journal_lines "$tmp/runs/sharded/shard-$i")
	[ "$n" -gt 0 ] || die "shard $i ran no key: the split did not split"
	per_shard+="$n "
	total=$((total + n))
done
[ "$total" = "$keys" ] || die "the shards ran $total keys ($per_shard), the unsharded run $keys"
cmp -s "$tmp/rows-single.jsonl" "$tmp/rows-sharded.jsonl" ||
	die "the merged shards' rows differ from the unsharded run's: $(diff <(cut -c1-300 "$tmp/rows-single.jsonl") <(cut -c1-300 "$tmp/rows-sharded.jsonl") | head -n 6)"
grep -q 'shard-0' "$tmp/work/distill-${jid}_0.log" 2>/dev/null || die "no log of array task 0 in $tmp/work"
s1="scenario 1 ok: $rows rows from $N array tasks (keys per shard: ${per_shard% }) equal the unsharded run's row for row; unsharded ${t_single} s, array + curate job $(since "$t1") s"
echo "$s1"

say "scenario 2: student eval of the tiny checkpoint as a $N-task array, student merge as a dependent job"
t1=$(now)
flags="--tokenizer $tok --limit $EVAL_LIMIT --max-tokens 16"
# shellcheck disable=SC2086 # flags is a list of flags
bin/student eval --model "$tiny" --tasks sample $flags --out "$tmp/evals/single" --progress off >"$tmp/log/single-eval.log" 2>&1 ||
	die "single student eval: $(cat "$tmp/log/single-eval.log")"
t_single=$(since "$t1")
t1=$(now)
jid=$(MODEL="$tiny" EVALS="$tmp/evals" PARTS=$N EVAL_FLAGS="$flags" submit --array=0-$((N - 1)) --cpus-per-task=1 --mem=1G "$eval_array")
parts=$(for i in $(seq 0 $((N - 1))); do printf '%s ' "$tmp/evals/part-$i"; done)
mid=$(submit --dependency=afterok:"$jid" --job-name=merge --mem=1G --wrap "student merge --out $tmp/evals/merged $parts")
wait_done "$jid"
expect_completed "$jid" "eval array"
wait_done "$mid"
expect_completed "$mid" "student merge job"
for f in results.jsonl predict_dev.json; do
	cmp -s "$tmp/evals/single/$f" "$tmp/evals/merged/$f" || die "merged $f differs from the single run's: $(diff "$tmp/evals/single/$f" "$tmp/evals/merged/$f" | head -n 4)"
done
summary() { jq -S '{loaded, counts, complete, pending, failed, eval}' "$1/summary.json"; }
[ "$(summary "$tmp/evals/single")" = "$(summary "$tmp/evals/merged")" ] ||
	die "merged summary differs: $(diff <(summary "$tmp/evals/single") <(summary "$tmp/evals/merged") | head -n 8)"
tasks=$(jq .loaded "$tmp/evals/merged/summary.json")
[ "$tasks" = "$EVAL_LIMIT" ] || die "the merged eval holds $tasks tasks, want $EVAL_LIMIT"
per_part=$(for i in $(seq 0 $((N - 1))); do printf '%s ' "$(jq .loaded "$tmp/evals/part-$i/summary.json")"; done)
s2="scenario 2 ok: $tasks tasks in $N parts (${per_part% }) merge to the single run's results, predictions and summary; single ${t_single} s, array + merge job $(since "$t1") s"
echo "$s2"

say "scenario 3: the distill array again; task 1 cancelled (SIGTERM), task 2 killed (SIGKILL) mid-run, both resubmitted"
t1=$(now)
runs=$tmp/runs/resumed
slow() { TEACHERS_CONFIG="$tmp/teacher-slow.yaml" RUNS="$runs" submit "$@" "$distill_array"; }
jid=$(slow --array=0-$((N - 1)) --cpus-per-task=1 --mem=1G)
# mid_run I: wait until array task I runs and has committed a trajectory of the scripted teacher.
mid_run() {
	local deadline=$((SECONDS + WAIT))
	until [ "$(squeue -h -j "${jid}_$1" -o %T 2>/dev/null)" = RUNNING ] && grep -q '"teacher":"scripted"' "$runs/shard-$1/journal" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || die "array task $1 did not get under way in $WAIT s (state: $(states "${jid}_$1" | tr '\n' ' '))"
		[ "$(states "${jid}_$1")" = COMPLETED ] && die "array task $1 finished before it could be stopped mid-run"
		sleep 0.1
	done
}
mid_run 1
scancel "${jid}_1"
mid_run 2
# SIGKILL to distill itself, as the OOM killer or a crash would (scancel --signal=KILL is a plain
# cancel to Slurm: SIGTERM first).
tid=$(squeue -h -j "${jid}_2" -o %A)
victims=$(scontrol listpids "$tid" | awk 'NR > 1 { print $1 }' | while read -r p; do
	[ "$(cat "/proc/$p/comm" 2>/dev/null)" = distill ] && echo "$p"
done)
[ -n "$victims" ] || die "no distill process in array task 2 (scontrol listpids $tid: $(scontrol listpids "$tid" 2>&1 | tr '\n' ' '))"
# shellcheck disable=SC2086 # a list of pids
kill -KILL $victims
wait_done "$jid"
for i in 0 3; do
	[ "$(states "${jid}_$i")" = COMPLETED ] || die "array task $i: $(states "${jid}_$i")"
done
st1=$(states "${jid}_1")
st2=$(states "${jid}_2")
[ "$st1" = CANCELLED ] || die "array task 1 is $st1 after scancel, want CANCELLED"
[ "$st2" = FAILED ] || die "array task 2 is $st2 after SIGKILL, want FAILED"
done1=$(journal_lines "$runs/shard-1")
done2=$(journal_lines "$runs/shard-2")
want1=$(journal_lines "$tmp/runs/sharded/shard-1")
want2=$(journal_lines "$tmp/runs/sharded/shard-2")
if [ "$done1" -ge "$want1" ] || [ "$done2" -ge "$want2" ]; then
	die "the stopped tasks had done all their keys (1: $done1/$want1, 2: $done2/$want2): not stopped mid-run"
fi
rid=$(slow --array=1,2 --cpus-per-task=1 --mem=1G)
declare -A resumed
wait_done "$rid"
expect_completed "$rid" "resubmitted tasks 1,2"
for i in 1 2; do
	log="$tmp/work/distill-${rid}_$i.log"
	line=$(grep -o '[0-9]* keys, [0-9]* done earlier, [0-9]* done now, [0-9]* failed now' "$log") || die "no run summary in $log"
	read -r k _ e _ _ d _ _ f _ _ <<<"$line"
	want=$(journal_lines "$tmp/runs/sharded/shard-$i")
	if [ "$k" != "$want" ] || [ "$e" = 0 ] || [ "$d" = 0 ] || [ "$f" != 0 ] || [ $((e + d)) != "$want" ]; then
		die "resubmitted task $i: \"$line\", want $want keys, some done earlier, the rest now"
	fi
	resumed[$i]="$e done earlier + $d now"
done
# shellcheck disable=SC2046 # shards_of lists the shard dirs
curate build --tokenizer "$tok" --out "$tmp/ds-resumed" $(shards_of "$runs") >"$tmp/log/resumed-curate.log" 2>&1 ||
	die "curate build of the resumed shards: $(cat "$tmp/log/resumed-curate.log")"
"$tmp/bin/e2etool" rows "$tmp/ds-resumed" >"$tmp/rows-resumed.jsonl"
cmp -s "$tmp/rows-single.jsonl" "$tmp/rows-resumed.jsonl" ||
	die "the resumed shards' rows differ from the unsharded run's: $(diff <(cut -c1-300 "$tmp/rows-single.jsonl") <(cut -c1-300 "$tmp/rows-resumed.jsonl") | head -n 6)"
s3="scenario 3 ok: task 1 cancelled at $done1/$want1 keys (resumed: ${resumed[1]}), task 2 killed at $done2/$want2 (resumed: ${resumed[2]}); $rows rows equal the unsharded run's; $(since "$t1") s"
echo "$s3"

say "slurm-e2e: all 3 scenarios hold on Slurm $(sinfo -V | cut -d' ' -f2) in $(since "$t_all") s"
printf '%s\n' "$s1" "$s2" "$s3" "slurm-e2e: 3 passed, 0 failed"
