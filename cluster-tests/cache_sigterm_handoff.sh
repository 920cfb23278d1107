#!/usr/bin/env bash
# cache_sigterm_handoff: SIGTERM makes a dgnode leave gracefully and hand
# its partitions over.  A PARTITIONED cache with NO backups on 3 servers
# (each partition lives on one node only, so nothing but the handoff can
# keep a leaving node's data):
#  1. put k0..k19999 = v<i>-r1 through a client node;
#  2. SIGTERM n2: it logs HANDOFF-DONE, exits 0; n1 and n3 agree on 2 nodes;
#  3. verify round 1 through n1 and n3: every key is there; size 20000;
#     n1 and n3 logged no PARTITION-LOST.
set -euo pipefail
source "$(dirname "$0")/cachelib.sh"

N=20000
FT=1000
CACHE=solo
NODE_ARGS=(--failure-detection-timeout "$FT" --cache "$CACHE,backups=0,sync=full_sync")
CLIENT_ARGS=(--cache "$CACHE" --threads 16 --failure-detection-timeout "$FT")
declare -A PORT_OF=()

for n in n1 n2 n3; do
	free_port
	PORT_OF[$n]=$PORT
done
start_dgnode n1 "${PORT_OF[n1]}" "${NODE_ARGS[@]}"
wait_dgnode n1
start_dgnode n2 "${PORT_OF[n2]}" "${NODE_ARGS[@]}" --seed "${URL[n1]}"
start_dgnode n3 "${PORT_OF[n3]}" "${NODE_ARGS[@]}" --seed "${URL[n1]}"
wait_dgnode n2
wait_dgnode n3
wait_until 10000 "n1, n2, n3 agree on a 3-node topology" agree_nodes 3 n1 n2 n3

log "1. put round 1 (backups=0)"
seeds_of n1 n2 n3
client put1 30000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" put --count $N --round 1
[[ $CLIENT_RC == 0 ]] || die "put1: not every put was acknowledged"
wait_until 10000 "the client left: 3 nodes again" agree_nodes 3 n1 n2 n3

log "2. SIGTERM n2: a graceful leave"
stop_node n2
check "n2 exited 0 on SIGTERM" test "${RC[n2]}" = 0
check "n2 handed its partitions over" has_log n2 ' id=HANDOFF-DONE partitions=[1-9]'
log "n2: $(grep -m1 ' id=HANDOFF-DONE ' "$WORK/n2.err")"
wait_until 10000 "n1 and n3 agree on 2 nodes" agree_nodes 2 n1 n3

log "3. verify through n1 and n3"
seeds_of n1 n3
client verify1 30000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" verify --count $N --round 1
check "verify1: all $N keys survived the leave" test "$CLIENT_RC" = 0
client size1 20000 "${SEEDS[@]}" --cache "$CACHE" size
check "size1: $N entries" grep -q -x "size $N" "$WORK/size1.out"
# (only now: the TOPOLOGY line comes before the caches apply the topology,
# where a lost partition would be logged; the reads above needed them at it)
check "n1 logged no PARTITION-LOST" lacks_log n1 ' id=PARTITION-LOST '
check "n3 logged no PARTITION-LOST" lacks_log n3 ' id=PARTITION-LOST '

stop_all_checked
finish
