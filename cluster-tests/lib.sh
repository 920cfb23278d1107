# lib.sh — shared by the cluster test scripts (sourced, not run).
#
# A test script is run by ctest as `bash <test>.sh <path to tpnode>` (the
# cache tests: `bash <test>.sh <dgnode> <cacheclient>`, through cachelib.sh).
# This file gives it:
#   - a fresh work directory ($WORK) and an EXIT trap that stops (TERM, then
#     KILL) and reaps every process the test started, prints their output when
#     the test failed, and removes $WORK (kept when DG_KEEP_WORK=1);
#   - start_node / wait_ready / stop_node / kill9_node over tpnode processes,
#     whose stdout (READY / TOPOLOGY / STATS lines) is in $WORK/<name>.out and
#     stderr (library logs) in $WORK/<name>.err;
#   - start_proc: the same for any program (dgnode, cacheclient);
#   - free_port: a free TCP port, for a node restarted on the same address;
#   - wait_until: polls a predicate against a deadline (never a bare sleep);
#   - check / finish: record every check, print it, fail at the end.
# Everything listens on 127.0.0.1 only (netns_three_hosts.sh: inside its own
# network namespaces).  A test that makes more than processes defines
# cleanup_extra: the EXIT trap calls it after stopping every process.
# shellcheck disable=SC2034  # variables set here are read by the test scripts
set -euo pipefail
export LC_ALL=C   # EPOCHREALTIME with a '.', plain sort order

TPNODE=${1:?usage: $0 /path/to/tpnode}
[[ -x $TPNODE ]] || { echo "tpnode not executable: $TPNODE" >&2; exit 1; }
TEST_NAME=$(basename "$0" .sh)
# The script's own deadline, below ctest's TIMEOUT (120 s), so that the EXIT
# trap always gets to run and no process outlives the test.
TEST_BUDGET_MS=${DG_TEST_BUDGET_MS:-100000}
POLL_S=0.02
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dg-$TEST_NAME.XXXXXX")
FAILED=0
NODES=()                 # every node name, in start order
declare -A PID=()        # name -> pid while not reaped
declare -A RC=()         # name -> exit status once reaped
declare -A ID=() ADDR=() # from READY

now_ms() { local t=${EPOCHREALTIME/./}; NOW=$((10#$t / 1000)); }
now_ms
T0=$NOW

log() {
	now_ms
	local e=$((NOW - T0))
	printf '[%s +%d.%03ds] %s\n' "$TEST_NAME" $((e / 1000)) $((e % 1000)) "$*"
}
die() { log "FAIL: $*"; exit 1; }

# check DESCRIPTION CMD...: runs CMD; records and prints the outcome.
check() {
	local what=$1
	shift
	if "$@"; then
		log "ok: $what"
	else
		log "FAIL: $what"
		FAILED=1
	fi
}

# skip REASON: the test cannot run here (ctest shows it as skipped).
skip() { log "SKIP: $*"; exit 77; }

finish() {
	if ((FAILED)); then
		die "some checks failed"
	fi
	log "PASS"
	exit 0
}

# ---- processes ----

# alive NAME: the process is running (not exited, not a zombie).
alive() {
	local pid=${PID[$1]:-} st
	[[ -n $pid ]] || return 1
	read -r st 2>/dev/null </proc/"$pid"/stat || return 1
	st=${st##*) }
	[[ ${st:0:1} != Z && ${st:0:1} != X ]]
}

# reap NAME: waits for an exited (or killed) process, records its status.
reap() {
	local pid=${PID[$1]:-} rc=0
	[[ -n $pid ]] || return 0
	wait "$pid" || rc=$?
	RC[$1]=$rc
	unset "PID[$1]"
}

# start_proc NAME PROGRAM ARGS...: starts PROGRAM in the background, stdout
# in $WORK/NAME.out, stderr in $WORK/NAME.err; the EXIT trap stops it.  A
# NAME is used once per test (a restarted node gets a new name: its first
# life's logs stay).
start_proc() {
	local name=$1
	shift
	[[ ! -e $WORK/$name.err ]] || die "start_proc: the name $name is already used"
	"$@" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null &
	PID[$name]=$!
	NODES+=("$name")
}

# start_node NAME tpnode-args...
start_node() {
	local name=$1
	shift
	start_proc "$name" "$TPNODE" "$@"
}

# free_port: sets PORT to a TCP port nothing on this machine uses now (no
# socket in /proc/net/tcp{,6} with it as local or remote port), taken below
# the kernel's ephemeral range so that no outgoing connection picks it while
# a killed node is down, before its restart on the same address.  Never the
# same port twice in one test.  A dgnode given only a listen port takes
# port + 100 and port + 200 for its admin and HTTP endpoints (auto): each
# port handed out keeps those two free as well, and none of the three is
# handed out again in the test (one node's HTTP port was another's cluster
# port: cluster_restart_joins failed in CI with DG_ERR_ADDRINUSE).
declare -A PORT_TAKEN=()
port_in_use() {
	grep -q -F "$(printf ':%04X ' "$1")" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
free_port() {
	local lo=32768 p i
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	((lo > 11024)) || die "free_port: the ephemeral range starts at $lo: no room below it"
	for ((i = 0; i < 1000; i++)); do
		p=$((lo - 10000 + RANDOM % 9800))
		[[ -z ${PORT_TAKEN[$p]:-} && -z ${PORT_TAKEN[$((p + 100))]:-} &&
			-z ${PORT_TAKEN[$((p + 200))]:-} ]] || continue
		port_in_use "$p" || port_in_use $((p + 100)) || port_in_use $((p + 200)) && continue
		PORT_TAKEN[$p]=1 PORT_TAKEN[$((p + 100))]=1 PORT_TAKEN[$((p + 200))]=1
		PORT=$p
		return 0
	done
	die "free_port: no free port found in $((lo - 10000))..$((lo - 201))"
}

budget_left_ms() { now_ms; echo $((T0 + TEST_BUDGET_MS - NOW)); }

# wait_until TIMEOUT_MS DESCRIPTION CMD...: polls CMD until it succeeds.
# Dies when TIMEOUT_MS (or the test's budget) runs out.  Sets WAITED_MS.
wait_until() {
	local timeout=$1 what=$2 start end why=""
	shift 2
	now_ms
	start=$NOW
	end=$((start + timeout))
	if ((end > T0 + TEST_BUDGET_MS)); then
		end=$((T0 + TEST_BUDGET_MS))
		why=" (the test's budget of $TEST_BUDGET_MS ms ran out)"
	fi
	while :; do
		if "$@"; then
			now_ms
			WAITED_MS=$((NOW - start))
			return 0
		fi
		now_ms
		((NOW < end)) || die "timed out after $((NOW - start)) ms$why waiting for: $what"
		sleep "$POLL_S"
	done
}

has_line() { grep -q -m1 -E "$2" "$WORK/$1.out" 2>/dev/null; }

ready_or_dead() { has_line "$1" '^READY ' || ! alive "$1"; }

# wait_ready NAME [TIMEOUT_MS]: READY printed; sets ID[NAME], ADDR[NAME].
wait_ready() {
	local name=$1 timeout=${2:-15000} line
	wait_until "$timeout" "$name READY" ready_or_dead "$name"
	has_line "$name" '^READY ' || die "$name exited before READY: $(tail -n 3 "$WORK/$name.err" | tr '\n' ' ')"
	line=$(grep -m1 '^READY ' "$WORK/$name.out")
	[[ $line =~ ^READY\ node=([0-9a-f]{16})\ address=([^ ]+)$ ]] ||
		die "$name: bad READY line: $line"
	ID[$name]=${BASH_REMATCH[1]}
	ADDR[$name]=${BASH_REMATCH[2]}
	log "$name ready: id=${ID[$name]} address=${ADDR[$name]}"
}

# topo NAME: TV and TN (comma-separated ids) of NAME's last TOPOLOGY line;
# TV=0, TN="" when none yet.
topo() {
	local line
	line=$(grep '^TOPOLOGY ' "$WORK/$1.out" 2>/dev/null | tail -n 1) || true
	TV=0 TN=""
	if [[ $line =~ ^TOPOLOGY\ version=([0-9]+)\ nodes=([0-9a-f,]*)$ ]]; then
		TV=${BASH_REMATCH[1]}
		TN=${BASH_REMATCH[2]}
	fi
}

# topo_count NAME: how many TOPOLOGY lines NAME printed.
topo_count() { grep -c '^TOPOLOGY ' "$WORK/$1.out" 2>/dev/null || true; }

# agree EXPECTED_IDS NAME...: every NAME's last topology lists exactly
# EXPECTED_IDS (comma-separated, in order) with one version.  Sets AGREED_V.
agree() {
	local want=$1 v="" n
	shift
	for n in "$@"; do
		topo "$n"
		[[ $TN == "$want" ]] || return 1
		[[ -z $v || $v == "$TV" ]] || return 1
		v=$TV
	done
	AGREED_V=$v
}

# agree_count COUNT NAME...: every NAME's last topology has COUNT ids and
# they are all the same (ids and version).  Sets AGREED_V, AGREED_N.
agree_count() {
	local count=$1 first=$2
	shift
	topo "$first"
	local ids=$TN
	[[ -n $ids ]] || return 1
	local -a arr
	IFS=, read -r -a arr <<<"$ids"
	((${#arr[@]} == count)) || return 1
	agree "$ids" "$@" || return 1
	AGREED_N=$ids
}

# stats NAME: SA (auth_failures), SH (handshake_failures), SM (malformed)
# from NAME's last STATS line (all 0 when none yet).
stats() {
	local line
	line=$(grep '^STATS ' "$WORK/$1.out" 2>/dev/null | tail -n 1) || true
	SA=0 SH=0 SM=0
	if [[ $line =~ auth_failures=([0-9]+)\ handshake_failures=([0-9]+)\ malformed=([0-9]+) ]]; then
		SA=${BASH_REMATCH[1]} SH=${BASH_REMATCH[2]} SM=${BASH_REMATCH[3]}
	fi
}

# kill9_node NAME: SIGKILL and reap.
kill9_node() {
	kill -KILL "${PID[$1]}" 2>/dev/null || true
	reap "$1"
}

# wait_exit NAME TIMEOUT_MS: waits for NAME to exit by itself, reaps it.
wait_exit() {
	local name=$1
	wait_until "$2" "$name to exit" eval '! alive '"$name"
	reap "$name"
}

# stop_node NAME: SIGTERM (graceful leave), waits up to 10 s, reaps; the
# exit status is in RC[NAME] (0 expected).  SIGKILL if it hangs.
stop_node() {
	local name=$1
	[[ -n ${PID[$name]:-} ]] || return 0
	kill -TERM "${PID[$name]}" 2>/dev/null || true
	local end
	now_ms
	end=$((NOW + 10000))
	while alive "$name"; do
		now_ms
		if ((NOW >= end)); then
			log "$name did not stop within 10 s of SIGTERM: SIGKILL"
			kill -KILL "${PID[$name]}" 2>/dev/null || true
			break
		fi
		sleep "$POLL_S"
	done
	reap "$name"
}

# stop_all_checked: stops the running nodes one at a time, last started
# first, and checks each exits 0 on SIGTERM.
stop_all_checked() {
	local i name
	for ((i = ${#NODES[@]} - 1; i >= 0; i--)); do
		name=${NODES[i]}
		[[ -n ${PID[$name]:-} ]] || continue
		stop_node "$name"
		check "$name exits 0 on SIGTERM (got ${RC[$name]})" test "${RC[$name]}" = 0
	done
}

cleanup() {
	local rc=$? name i
	set +e
	trap - EXIT INT TERM
	# TERM every node still running, then KILL what is left after 5 s.
	for name in "${!PID[@]}"; do
		kill -TERM "${PID[$name]}" 2>/dev/null
	done
	now_ms
	local end=$((NOW + 5000))
	for name in "${!PID[@]}"; do
		while alive "$name"; do
			now_ms
			((NOW < end)) || break
			sleep "$POLL_S"
		done
		kill -KILL "${PID[$name]}" 2>/dev/null
		reap "$name"
	done
	# A test's own teardown (namespaces, links, ...), after its processes
	# are gone: the function cleanup_extra, when the test defines one.
	if declare -F cleanup_extra >/dev/null; then
		cleanup_extra
	fi
	if ((rc != 0 && rc != 77)); then
		for name in "${NODES[@]}"; do
			echo "----- $name (exit ${RC[$name]:-?}) stdout, without STATS -----"
			grep -v '^STATS ' "$WORK/$name.out" 2>/dev/null | tail -n 20
			grep '^STATS ' "$WORK/$name.out" 2>/dev/null | tail -n 1
			echo "----- $name stderr (last 40 lines) -----"
			tail -n 40 "$WORK/$name.err" 2>/dev/null
			# what became of txs and topologies (a bank or register
			# violation is read against these; CI keeps no work dir)
			echo "----- $name topologies and tx outcomes (last 60) -----"
			grep -E ' id=(TOPOLOGY|TX-RECOVERED|TX-UNKNOWN|TX-FORGOTTEN|TX-FENCE-ROLLBACK|TX-BACKUP|SEGMENTED|REJOINED) ' \
				"$WORK/$name.err" 2>/dev/null | tail -n 60
		done
	fi
	if [[ ${DG_KEEP_WORK:-0} == 1 ]]; then
		log "work directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "work directory $WORK"
