#!/usr/bin/env bash
# cluster-demo.sh — the README's first command: a local 3-node cluster
# under a bank workload, one node killed with SIGKILL and restarted.
#
#   node/cluster-demo.sh [BUILD_DIR] [--base-port PORT|auto] [--seconds S]
#
# Starts 3 dgnodes on 127.0.0.1 (cluster ports BASE, BASE+10, BASE+20; their
# admin ports +100, HTTP ports +200; BASE 47500 by default, "auto": a free
# range below the ephemeral ports), each creating the cache
# "bank,backups=2,sync=full_sync,atomicity=transactional", with a 2 s
# failure-detection timeout.  Then: dgctl nodes, dgbank init, dgbank run
# for S seconds (default 25) in the background, dgctl metrics, SIGKILL of
# node 2, dgctl nodes and rebalance status, node 2 restarted, rebalancing
# onto it, dgbank total (the total must be unchanged), dgctl state, dgctl
# shutdown --cluster.  Every wait polls with a deadline.
#
# Exit status: 0 when the total balanced and every process stopped by
# itself; 1 otherwise (the nodes' logs are kept, and their path printed);
# 77 when the ports are taken (--base-port auto found none free); 130 on
# Ctrl-C.  On exit, however it happens, every process the script started
# is stopped (SIGTERM, then SIGKILL after 10 s for the workload and 15 s
# for the nodes) and reaped.
set -uo pipefail
export LC_ALL=C

BUILD=build
BASE=47500
RUN_S=25
while (($#)); do
	case $1 in
	--base-port) BASE=${2:?--base-port needs PORT or auto}; shift 2 ;;
	--seconds) RUN_S=${2:?--seconds needs a number}; shift 2 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "cluster-demo: unknown option $1 (--help)" >&2; exit 2 ;;
	*) BUILD=$1; shift ;;
	esac
done
BIN=$BUILD/node
for p in dgnode dgctl dgbank; do
	[[ -x $BIN/$p ]] || { echo "cluster-demo: $BIN/$p not built (cmake --build $BUILD)" >&2; exit 1; }
done
[[ $RUN_S =~ ^[0-9]+$ ]] && ((RUN_S >= 15)) || { echo "cluster-demo: --seconds: 15 or more" >&2; exit 2; }

CACHE_SPEC="bank,backups=2,sync=full_sync,atomicity=transactional"
FD_TIMEOUT_MS=2000
ACCOUNTS=100 BALANCE=1000

# ---- ports ----

# a socket on this machine has port $1 as its local or remote port
port_in_use() { grep -q -F "$(printf ':%04X ' "$1")" /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
# the first of the 9 ports from base $1 in use, or nothing
busy_port() {
	local i off
	for i in 0 10 20; do
		for off in 0 100 200; do
			port_in_use $(($1 + i + off)) && { echo $(($1 + i + off)); return; }
		done
	done
}
if [[ $BASE == auto ]]; then
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	for ((try = 0; try < 200; try++)); do
		BASE=$((lo - 9000 + (RANDOM % 850) * 10))
		[[ -z $(busy_port $BASE) ]] && break
		BASE=auto
	done
	[[ $BASE != auto ]] || { echo "cluster-demo: no free range of ports found below $lo" >&2; exit 77; }
elif ! [[ $BASE =~ ^[0-9]+$ ]] || ((BASE < 1024 || BASE > 65000)); then
	echo "cluster-demo: --base-port: 1024..65000 or auto" >&2
	exit 2
elif busy=$(busy_port "$BASE") && [[ -n $busy ]]; then
	echo "cluster-demo: port $busy is in use (the demo needs $BASE, $((BASE + 10)), $((BASE + 20))" >&2
	echo "  and each +100 and +200): stop what holds it, or run with --base-port auto" >&2
	exit 77
fi

# ---- processes, and the cleanup that stops them ----

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dg-cluster-demo.XXXXXX") || exit 1
NODE_PID=("" "" "" "")   # [1..3]
BANK_PID=""              # dgbank run, in the background
CHILD=""                 # the foreground step, run as a job so a signal is seen at once
OK=0

alive_pids() {
	local p
	for p in "$@"; do
		[[ -n $p ]] && kill -0 "$p" 2>/dev/null && echo "$p"
	done
}

# stop SECONDS PID...: SIGTERM, up to SECONDS for them to exit, then SIGKILL;
# reaps them.
stop() {
	local secs=$1 p i pids
	shift
	pids=$(alive_pids "$@")
	[[ -n $pids ]] || return 0
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null
	for ((i = 0; i < secs * 10; i++)); do
		[[ -z $(alive_pids $pids) ]] && break
		sleep 0.1
	done
	for p in $(alive_pids $pids); do
		echo "   pid $p did not stop within $secs s: SIGKILL"
		kill -KILL "$p" 2>/dev/null
	done
	# shellcheck disable=SC2086
	wait $pids 2>/dev/null
}

# The workload first (the nodes leave more quickly with no transaction in
# flight), then the nodes.
cleanup() {
	local rc=$? n
	trap '' INT TERM   # the cleanup is bounded: let it finish
	n=$(alive_pids "$CHILD" "$BANK_PID" "${NODE_PID[@]}" | wc -l)
	if ((n > 0)); then
		echo "== stopping the $n process(es) the demo started"
		stop 10 "$CHILD" "$BANK_PID"
		stop 15 "${NODE_PID[@]}"
	fi
	if ((OK || INTERRUPTED)); then
		rm -rf "$WORK"
		((OK)) || echo "== interrupted: every process the demo started is stopped"
	else
		echo "== FAILED (exit $rc); the nodes' and clients' logs are in $WORK" >&2
	fi
}
trap cleanup EXIT
INTERRUPTED=0
trap 'echo; echo "== interrupted"; INTERRUPTED=1; exit 130' INT
trap 'echo; echo "== terminated"; INTERRUPTED=1; exit 143' TERM

T0=$SECONDS
hdr() { printf '\n== [%2ds] %s\n' $((SECONDS - T0)) "$*"; }
die() { echo "cluster-demo: $*" >&2; exit 1; }

# The nodes and the workload run in sessions of their own (setsid, which
# keeps the pid: a background job is no process group leader), so Ctrl-C
# reaches the script alone and its trap stops them in order; the steps in
# the foreground get it too and end.
#
# fg CMD...: runs CMD as a job and waits for it, so that a signal runs the
# trap at once (bash delays traps until a foreground command ends).
fg() {
	"$@" &
	CHILD=$!
	wait "$CHILD"
	local rc=$?
	CHILD=""
	return $rc
}
pause() { fg sleep "$1"; }

# No command substitution past the trap: bash may drop a SIGINT that ends
# one (the assignment fails, the trap does not run).
PORT=("" $BASE $((BASE + 10)) $((BASE + 20)))
URL=("" tcp://127.0.0.1:${PORT[1]} tcp://127.0.0.1:${PORT[2]} tcp://127.0.0.1:${PORT[3]})
ctl() { local i=$1; shift; fg "$BIN/dgctl" --port $((PORT[i] + 100)) --timeout 3s "$@"; }
BANK=("$BIN/dgbank" --seed "${URL[1]}" --seed "${URL[3]}" --cache bank
    --accounts $ACCOUNTS --balance $BALANCE --failure-detection-timeout $FD_TIMEOUT_MS)

start_node() {
	local i=$1 seed=()
	((i > 1)) && seed=(--seed "${URL[1]}")
	setsid "$BIN/dgnode" --listen "${URL[i]}" "${seed[@]}" --cache "$CACHE_SPEC" \
	    --failure-detection-timeout $FD_TIMEOUT_MS >>"$WORK/node$i.log" 2>&1 &
	NODE_PID[$i]=$!
}

# wait_for SECONDS DESCRIPTION CMD...: polls CMD every 0.2 s until it
# succeeds; fails the demo after SECONDS, or (unless STOPPING) as soon as
# a node it started (and did not kill) died.
STOPPING=0
wait_for() {
	local end=$((SECONDS + $1)) what=$2 i
	shift 2
	until "$@" >/dev/null 2>&1; do
		for i in 1 2 3; do
			((STOPPING)) || [[ -z ${NODE_PID[i]} ]] || kill -0 "${NODE_PID[i]}" 2>/dev/null ||
			    die "node $i exited while waiting for $what (log: $WORK/node$i.log)"
		done
		((SECONDS < end)) || die "timed out after $1 s waiting for $what"
		pause 0.2
	done
}

settled() {
	local s=$WORK/state
	ctl "$1" state >"$s" 2>/dev/null || return 1
	grep -q "^server nodes: *$2\$" "$s" && grep -q '^state: *ACTIVE$' "$s" &&
	    grep -q '^partitions moving: *0$' "$s"
}
servers() {
	ctl "$1" state >"$WORK/state" 2>/dev/null && grep -q "^server nodes: *$2\$" "$WORK/state"
}
# every node process exited
nodes_gone() {
	local p
	for p in "${NODE_PID[@]}"; do
		[[ -n $p ]] && kill -0 "$p" 2>/dev/null && return 1
	done
	return 0
}
rebalance_watch() { fg timeout --foreground "$2" "$BIN/dgctl" --port $((PORT[$1] + 100)) \
    --timeout 3s rebalance status --watch --interval 1s; }

# ---- the demo ----

hdr "starting 3 dgnodes on 127.0.0.1:${PORT[1]},${PORT[2]},${PORT[3]} (dgctl: +100), cache $CACHE_SPEC"
start_node 1
wait_for 15 "node 1 to start" ctl 1 state
start_node 2
start_node 3
wait_for 30 "3 server nodes" settled 1 3
hdr "3 nodes up"
ctl 1 nodes || die "dgctl nodes failed"
ctl 1 cache list || die "dgctl cache list failed"

hdr "dgbank init: $ACCOUNTS accounts of $BALANCE in one transaction"
fg "${BANK[@]}" init 2>>"$WORK/dgbank-init.log" || die "dgbank init failed (log: $WORK/dgbank-init.log)"

hdr "dgbank run: $RUN_S s of transfers (4 threads, PESSIMISTIC REPEATABLE_READ)"
setsid "${BANK[@]}" run --seconds "$RUN_S" --threads 4 2>>"$WORK/dgbank-run.log" &
BANK_PID=$!
pause 5

hdr "dgctl metrics (node 1; transaction messages, caches, transactions)"
ctl 1 metrics >"$WORK/metrics" || die "dgctl metrics failed"
grep -E '^(MESSAGE TYPE|TX_)' "$WORK/metrics"
sed -n '/^CACHE  /,$p' "$WORK/metrics"

hdr "killing node 2 (${URL[2]}, pid ${NODE_PID[2]}) with SIGKILL"
kill -KILL "${NODE_PID[2]}"
{ wait "${NODE_PID[2]}"; } 2>/dev/null   # no "Killed" line from bash
NODE_PID[2]=""
wait_for 20 "node 1 to see 2 server nodes" servers 1 2
hdr "node 2's failure detected: 2 nodes"
ctl 1 nodes || die "dgctl nodes failed"
hdr "dgctl rebalance status --watch (every partition still has 2 copies)"
rebalance_watch 1 30 || die "rebalancing did not complete within 30 s"

hdr "restarting node 2"
start_node 2
wait_for 30 "node 2 to rejoin" servers 1 3
hdr "node 2 rejoined: rebalancing onto it"
rebalance_watch 1 60 || die "rebalancing did not complete within 60 s"
wait_for 30 "the cluster to settle" settled 1 3
ctl 1 nodes || die "dgctl nodes failed"

hdr "waiting for the workload to end"
wait_for $((RUN_S + 30)) "dgbank run to end" eval '! kill -0 $BANK_PID'
wait "$BANK_PID"
rc=$?
BANK_PID=""
((rc == 0)) || die "dgbank run failed: exit $rc (log: $WORK/dgbank-run.log)"

hdr "dgbank total: one transaction reads every account"
fg "${BANK[@]}" total 2>>"$WORK/dgbank-total.log" || die "the total is not balanced"

hdr "dgctl state"
ctl 1 state || die "dgctl state failed"

hdr "dgctl shutdown --cluster"
STOPPING=1
ctl 1 shutdown --cluster || die "dgctl shutdown failed"
wait_for 60 "every node to exit" nodes_gone
for i in 1 2 3; do
	wait "${NODE_PID[i]}"
	rc=$?
	((rc == 0)) || die "node $i exited with status $rc (log: $WORK/node$i.log)"
	NODE_PID[i]=""
done
OK=1
hdr "done: the total balanced through a SIGKILL and a restart; every node stopped"
