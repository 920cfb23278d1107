#!/usr/bin/env bash
# cache_persistence_restart: a persistent PARTITIONED FULL_SYNC cache with 2
# backups on 3 dgnode servers, each with its own --data-dir and
# --storage-sync (fsync at every commit), survives kill -9 of the whole
# cluster:
#  1. put k0..k<N-1> = v<i>-r1 through a client node (N = 50000,
#     DG_PERSIST_KEYS): every put acknowledged;
#  2. kill -9 all three servers;
#  3. restart them (same data dirs, addresses and seeds; n1 first): each
#     logs CACHE-LOADED with entries=N (backups=2: a copy of every
#     partition on each node); the load times are printed;
#  4. the three agree on a 3-node topology; verify: all N keys hold
#     round 1; size N.
# The clients are plain client nodes, without a data dir: they own nothing.
# The failure detection timeout is the default (10 s): nothing here needs a
# fast one (the whole cluster is killed), and every fsync'ed write waits on
# the transport's thread (txn/README.md, limits), so on a loaded machine a
# 1 s timeout had the nodes declare each other failed and the cluster fall
# apart into single nodes for good.
set -euo pipefail
# fsync'ed puts: ~2000/s on 2 idle cores, ~750/s under the 10-run loop's
# load (100000 took 130 s there, the put client's bound is 150 s): a larger
# budget than lib.sh's default (ctest's TIMEOUT for this test is 200 s)
DG_TEST_BUDGET_MS=${DG_TEST_BUDGET_MS:-180000}
source "$(dirname "$0")/cachelib.sh"

N=${DG_PERSIST_KEYS:-50000}
CACHE=pkv
FT=10000
CLIENT_ARGS=(--cache "$CACHE" --threads 16 --failure-detection-timeout "$FT")
declare -A PORT_OF=() DIR_OF=()

# start_cluster SUFFIX: n1 (forms the cluster), then n2 and n3 seeding n1,
# as processes n1SUFFIX, n2SUFFIX, n3SUFFIX; waits for NODE-READY of each.
start_cluster() {
	local s=$1 n
	for n in n1 n2 n3; do
		local -a args=(--failure-detection-timeout "$FT" --data-dir "${DIR_OF[$n]}"
			--storage-sync --cache "$CACHE,backups=2,sync=full_sync,persistence=true")
		[[ $n == n1 ]] || args+=(--seed "tcp://127.0.0.1:${PORT_OF[n1]}")
		start_dgnode "$n$s" "${PORT_OF[$n]}" "${args[@]}"
		# n1 first: the others join through it
		[[ $n != n1 ]] || wait_dgnode "n1$s"
	done
	wait_dgnode "n2$s"
	wait_dgnode "n3$s"
	wait_until 15000 "n1$s, n2$s, n3$s agree on a 3-node topology" \
		agree_nodes 3 "n1$s" "n2$s" "n3$s"
	log "cluster up: version=$AGREED_V"
}

# pclient NAME TIMEOUT_MS cacheclient-args...: a client node.
pclient() {
	client "$@"
}

for n in n1 n2 n3; do
	free_port
	PORT_OF[$n]=$PORT
	DIR_OF[$n]=$(mktemp -d "$WORK/data-$n.XXXXXX")
done

log "1. put round 1 into the persistent cache"
start_cluster ""
seeds_of n1 n2 n3
pclient put1 150000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" put --count $N --round 1
if [[ $CLIENT_RC != 0 ]]; then
	die "put1: not every put was acknowledged"
fi
log "ok: put1: all $N puts acknowledged"
wait_until 10000 "the client left: 3 nodes again" agree_nodes 3 n1 n2 n3

log "2. kill -9 n1, n2, n3"
for n in n1 n2 n3; do
	kill9_node "$n"
done

log "3. restart n1, n2, n3 on their data dirs"
now_ms
t_restart=$NOW
start_cluster r
now_ms
log "restarted cluster up $((NOW - t_restart)) ms after the first start"
load_max=0
for n in n1r n2r n3r; do
	line=$(grep -m1 ' id=CACHE-LOADED cache="'"$CACHE"'" ' "$WORK/$n.err" || true)
	log "$n: ${line:-no CACHE-LOADED line}"
	[[ $line =~ \ entries=([0-9]+)\ ms=([0-9]+)\ err=\"([^\"]*)\" ]] || {
		check "$n logged CACHE-LOADED for $CACHE" false
		continue
	}
	log "$n loaded ${BASH_REMATCH[1]} entries from disk in ${BASH_REMATCH[2]} ms"
	((BASH_REMATCH[2] <= load_max)) || load_max=${BASH_REMATCH[2]}
	check "$n loaded all $N entries without error" \
		test "${BASH_REMATCH[1]}:${BASH_REMATCH[3]%%:*}" = "$N:DG_OK"
done
log "restart load: the slowest node loaded in $load_max ms (CACHE-LOADED)"

log "4. verify through the restarted cluster"
seeds_of n1r n2r n3r
pclient verify1 30000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" verify --count $N --round 1
check "verify1: all $N keys hold round 1 after the restart" test "$CLIENT_RC" = 0
pclient size1 20000 "${SEEDS[@]}" --cache "$CACHE" size
check "size1: $N entries" grep -q -x "size $N" "$WORK/size1.out"
for n in n1r n2r n3r; do
	check "$n logged no PARTITION-LOST" lacks_log "$n" ' id=PARTITION-LOST '
done

stop_all_checked
finish
