# cachelib.sh — shared by the dgnode cache tests (sourced, not run).
#
# A cache test is run by ctest as `bash <test>.sh <dgnode> <cacheclient>`.
# This file sources lib.sh (work directory, EXIT trap that stops every
# process started, wait_until, check / finish) and adds:
#   - start_dgnode / wait_dgnode: dgnode servers on a fixed 127.0.0.1 port
#     (from free_port, so that a killed node restarts on the same address);
#     dgnode logs to stderr, $WORK/<name>.err, where the tests poll;
#   - dg_topo / agree_nodes: the node's last `id=TOPOLOGY version=V nodes=N`
#     line (N counts client nodes too);
#   - seeds_of: --seed flags for a list of nodes;
#   - client: one cacheclient run in the background (the trap stops it),
#     bounded by a deadline, its result lines logged.
# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are read by the test scripts
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DGNODE=$TPNODE
CACHECLIENT=${2:?usage: $0 /path/to/dgnode /path/to/cacheclient}
[[ -x $CACHECLIENT ]] || die "cacheclient not executable: $CACHECLIENT"
declare -A URL=() # name -> the URL the node listens on

# has_log NAME ERE: NAME's stderr log has a line matching ERE.
has_log() { grep -q -m1 -E "$2" "$WORK/$1.err" 2>/dev/null; }
# lacks_log NAME ERE: no such line.
lacks_log() { ! has_log "$@"; }

# start_dgnode NAME PORT dgnode-args...: a dgnode listening on 127.0.0.1:PORT.
start_dgnode() {
	local name=$1 port=$2
	shift 2
	URL[$name]=tcp://127.0.0.1:$port
	start_proc "$name" "$DGNODE" --listen "${URL[$name]}" "$@"
}

dg_ready_or_dead() { has_log "$1" ' id=NODE-READY ' || ! alive "$1"; }

# wait_dgnode NAME [TIMEOUT_MS]: NODE-READY logged (joined, caches created);
# sets ID[NAME] and ADDR[NAME].
wait_dgnode() {
	local name=$1 timeout=${2:-15000} line
	wait_until "$timeout" "$name NODE-READY" dg_ready_or_dead "$name"
	has_log "$name" ' id=NODE-READY ' ||
		die "$name exited before NODE-READY: $(grep 'level=error' "$WORK/$name.err" | tail -n 3 | tr '\n' ' ')"
	line=$(grep -m1 ' id=NODE-READY ' "$WORK/$name.err")
	[[ $line =~ \ node=([0-9a-f]{16})\ address=([^ ]+)\  ]] ||
		die "$name: bad NODE-READY line: $line"
	ID[$name]=${BASH_REMATCH[1]}
	ADDR[$name]=${BASH_REMATCH[2]}
	log "$name ready: id=${ID[$name]} address=${ADDR[$name]}"
}

# dg_topo NAME: TV (version) and TC (node count) of NAME's last TOPOLOGY
# line; 0 and 0 when none yet.
dg_topo() {
	local line
	line=$(grep ' id=TOPOLOGY ' "$WORK/$1.err" 2>/dev/null | tail -n 1) || true
	TV=0 TC=0
	if [[ $line =~ \ id=TOPOLOGY\ version=([0-9]+)\ nodes=([0-9]+)\  ]]; then
		TV=${BASH_REMATCH[1]}
		TC=${BASH_REMATCH[2]}
	fi
}

# agree_nodes COUNT NAME...: every NAME's last TOPOLOGY has COUNT nodes, and
# all have the same version.  Sets AGREED_V.
agree_nodes() {
	local count=$1 v="" n
	shift
	for n in "$@"; do
		dg_topo "$n"
		((TC == count)) || return 1
		[[ -z $v || $v == "$TV" ]] || return 1
		v=$TV
	done
	AGREED_V=$v
}

# The fault tests' servers live in slots (SRV: the current server of each
# slot, SERVERS of them, 3 unless set) next to workload clients (CLIENTS).

# servers_agree NAME...: every NAME's last TOPOLOGY has one version and
# counts the NAMEs plus the clients still running.
servers_agree() {
	local c=0 n
	for n in "${CLIENTS[@]}"; do
		if alive "$n"; then c=$((c + 1)); fi
	done
	agree_nodes $(($# + c)) "$@"
}

# others SLOT: OTHERS=(the servers of the other slots)
others() {
	local i
	OTHERS=()
	for ((i = 0; i < ${SERVERS:-3}; i++)); do
		((i == $1)) || OTHERS+=("${SRV[i]}")
	done
}

# A nemesis's random numbers, reproducible: seed RNG (the test's SEED);
# rng N: R in 0..N-1.
rng() {
	RNG=$(((RNG * 1103515245 + 12345) % 2147483648))
	R=$(((RNG >> 8) % $1))
}
wall_ms() { local t=${EPOCHREALTIME/./}; WALL=$((10#$t / 1000)); }

# clients_started: every workload client in CLIENTS printed its start line
# (register-run or bank-run).
clients_started() {
	local c
	for c in "${CLIENTS[@]}"; do
		has_line "$c" '^(register|bank)-run client=' || return 1
	done
}

# seeds_of NAME...: SEEDS=(--seed URL ...) for the nodes named.
seeds_of() {
	local n
	SEEDS=()
	for n in "$@"; do
		SEEDS+=(--seed "${URL[$n]}")
	done
}

# client NAME TIMEOUT_MS cacheclient-args...: runs cacheclient, waits for it
# to exit (dies after TIMEOUT_MS; the trap stops it), logs its stdout.
# CLIENT_RC: its exit status.
client() {
	local name=$1 timeout=$2 line
	shift 2
	start_proc "$name" "$CACHECLIENT" "$@"
	wait_exit "$name" "$timeout"
	CLIENT_RC=${RC[$name]}
	while IFS= read -r line; do
		log "  $name: $line"
	done <"$WORK/$name.out"
	log "$name exited $CLIENT_RC after $WAITED_MS ms"
}
