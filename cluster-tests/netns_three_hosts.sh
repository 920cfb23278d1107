#!/usr/bin/env bash
# netns_three_hosts: three dgnode servers on three "hosts" — network
# namespaces with their own addresses, joined by a bridge — deployed the way
# node/DEPLOY.md says: each listens on its host's address, port 47500, and
# every node lists the same three seeds (itself included).
#
#   namespaces  dgt<pid>-h1, -h2, -h3 (the hosts), dgt<pid>-br (the bridge
#               br0; one veth pair per host, eth0 on the host's side)
#   addresses   10.231.N.1/24, .2, .3 on the hosts' eth0, N = pid % 256
#               (nothing is added to the machine's own namespace)
#
#  1. start the three nodes at once (cache kv: partitioned, transactional,
#     backups=2, FULL_SYNC); they agree on a 3-node topology;
#  2. a cacheclient in h1 puts k0..k<N-1> (every put acknowledged);
#  3. a cacheclient in h2 verifies every key;
#  4. kill -9 the node in h1; the two others agree on 2 nodes;
#  5. a cacheclient in h3 verifies every key through them.
# Needs root and `ip` (iproute2) with network namespaces: otherwise exit 77
# with the reason.  The EXIT trap (lib.sh's, then netnslib.sh's
# cleanup_extra) kills every process and deletes every namespace this test
# made, pass or fail.
set -euo pipefail
source "$(dirname "$0")/cachelib.sh"
source "$(dirname "$0")/netnslib.sh"

N=${DG_NETNS_KEYS:-10000}
FT=1000
CACHE=kv
PORT=47500
PREFIX=dgt$$
HOSTS=(h1 h2 h3)
netns_hosts "$PREFIX" "10.231.$(($$ % 256))" "${HOSTS[@]}"
log "namespaces ${NS_MADE[*]}; hosts ${IP[h1]}, ${IP[h2]}, ${IP[h3]} on bridge br0 in $PREFIX-br"

# The hosts reach each other (a few ms for the bridge ports to forward).
if command -v ping >/dev/null; then
	wait_until 10000 "the hosts ping each other over the bridge" netns_pings "${HOSTS[@]}"
fi

SEEDS=()
for h in "${HOSTS[@]}"; do
	URL[$h]=tcp://${IP[$h]}:$PORT
	SEEDS+=(--seed "${URL[$h]}")
done
NODE_ARGS=(--failure-detection-timeout "$FT"
	--cache "$CACHE,backups=2,sync=full_sync,atomicity=transactional")

log "1. start the three nodes at once, each with all three seeds"
for h in "${HOSTS[@]}"; do
	start_proc "$h" ip netns exec "${NS[$h]}" "$DGNODE" --listen "${URL[$h]}" \
		"${SEEDS[@]}" "${NODE_ARGS[@]}"
done
for h in "${HOSTS[@]}"; do
	wait_dgnode "$h" 30000
done
wait_until 20000 "h1, h2, h3 agree on a 3-node topology" agree_nodes 3 h1 h2 h3
log "cluster up across the namespaces: version=$AGREED_V"
for h in "${HOSTS[@]}"; do
	check "$h's address is its host's (${ADDR[$h]})" test "${ADDR[$h]}" = "${URL[$h]}"
done
check "one cluster formed (one CLUSTER-FORMED among the three logs)" \
	test "$(cat "$WORK"/h[123].err | grep -c ' id=CLUSTER-FORMED ')" = 1

# ns_client NAME HOST TIMEOUT_MS cacheclient-args...: cacheclient as a client
# node in HOST's namespace, listening on HOST's address; as cachelib's
# client (CLIENT_RC, its stdout logged).
ns_client() {
	local name=$1 h=$2 timeout=$3 line
	shift 3
	start_proc "$name" ip netns exec "${NS[$h]}" "$CACHECLIENT" \
		--listen "tcp://${IP[$h]}:0" --failure-detection-timeout "$FT" \
		--cache "$CACHE" "$@"
	wait_exit "$name" "$timeout"
	CLIENT_RC=${RC[$name]}
	while IFS= read -r line; do
		log "  $name: $line"
	done <"$WORK/$name.out"
	log "$name exited $CLIENT_RC after $WAITED_MS ms"
}

log "2. put $N keys FULL_SYNC from a client in h1"
ns_client put1 h1 40000 "${SEEDS[@]}" put --count "$N" --round 1
[[ $CLIENT_RC == 0 ]] || die "put1: not every put was acknowledged"
log "ok: put1: all $N puts acknowledged"
wait_until 10000 "the client left: 3 nodes again" agree_nodes 3 h1 h2 h3

log "3. verify every key from a client in h2"
ns_client verify1 h2 30000 "${SEEDS[@]}" verify --count "$N" --round 1
check "verify1 (from h2): all $N keys hold round 1" test "$CLIENT_RC" = 0
wait_until 10000 "the client left: 3 nodes again" agree_nodes 3 h1 h2 h3

log "4. kill -9 the node in h1 (${ID[h1]})"
kill9_node h1
wait_until 15000 "h2, h3 agree on a 2-node topology" agree_nodes 2 h2 h3
check "h2 or h3 logged NODE-FAILED for h1" \
	eval "has_log h2 ' id=NODE-FAILED node=${ID[h1]} ' || has_log h3 ' id=NODE-FAILED node=${ID[h1]} '"

log "5. verify every key from a client in h3"
ns_client verify2 h3 30000 "${SEEDS[@]}" verify --count "$N" --round 1
check "verify2 (from h3, h1 dead): all $N keys hold round 1" test "$CLIENT_RC" = 0
check "no partition lost" eval "lacks_log h2 ' id=PARTITION-LOST ' && lacks_log h3 ' id=PARTITION-LOST '"

stop_all_checked
finish
