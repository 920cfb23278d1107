#!/usr/bin/env bash
# cache_kill9_failover: a PARTITIONED FULL_SYNC cache with 2 backups on 3
# dgnode servers (failure-detection-timeout 1000 ms) keeps every
# acknowledged write through kill -9 and a restart.  cacheclient is a client
# node (owns nothing), so every read and write goes to the servers.
#  1. put k0..k99999 = v<i>-r1: every put acknowledged;
#  2. kill -9 one server (random; DG_VICTIM=1|2|3 picks one): the two
#     survivors log the same 2-node TOPOLOGY; verify round 1: all there;
#  3. put round 2 over every key (2 servers), in batches: put_all of 100
#     keys (one CACHE_UPDATE_ALL per primary, the copies one
#     CACHE_BACKUP_ALL per backup);
#  4. restart the killed server (same address, fresh process, in memory);
#     wait for its REBALANCE-DONE; verify round 2 with get_all of 100;
#  5. kill -9 another original server; verify round 2 with get_all of 100;
#  6. kill -9 the last original server: the restarted one is one of two
#     voters, no majority (partition_policy=majority): it logs SEGMENTED
#     and removes nobody;
#  7. restart that server too (same address, in memory): its JOIN is its
#     address's vote, the two go on; it fetches every partition from the
#     other (backups=2 gave that one a copy of each); verify round 2, size
#     100000, no partition lost.
set -euo pipefail
source "$(dirname "$0")/cachelib.sh"

N=100000
FT=1000
CACHE=kv
NODE_ARGS=(--failure-detection-timeout "$FT" --cache "$CACHE,backups=2,sync=full_sync")
CLIENT_ARGS=(--cache "$CACHE" --threads 16 --failure-detection-timeout "$FT")
declare -A PORT_OF=()

# kill_and_wait VICTIM SURVIVOR...: kill -9 VICTIM; the survivors agree on
# a topology of their count (no client runs meanwhile), and one of them
# logged NODE-FAILED for the victim.
kill_and_wait() {
	local victim=$1 t_kill
	shift
	now_ms
	t_kill=$NOW
	kill9_node "$victim"
	wait_until 10000 "$* agree on a $# node topology without $victim" agree_nodes $# "$@"
	now_ms
	log "$* agree on version=$AGREED_V nodes=$#, $((NOW - t_kill)) ms after the kill"
	local n found=0
	for n in "$@"; do
		has_log "$n" " id=NODE-FAILED node=${ID[$victim]} " && found=1
	done
	check "a survivor logged NODE-FAILED for $victim (${ID[$victim]})" test $found = 1
}

# verify NAME ROUND NODE...: cacheclient verify through NODE... must pass
# (with the options in VERIFY_ARGS: --batch B reads B keys per get_all).
VERIFY_ARGS=()
verify() {
	local name=$1 round=$2
	shift 2
	seeds_of "$@"
	client "$name" 30000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" verify --count $N --round "$round" \
	    ${VERIFY_ARGS[@]+"${VERIFY_ARGS[@]}"}
	check "$name: all $N keys hold round $round (through $*${VERIFY_ARGS[*]+ ${VERIFY_ARGS[*]}})" \
	    test "$CLIENT_RC" = 0
}

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
log "cluster up: version=$AGREED_V"

log "1. put round 1"
# (100,000 FULL_SYNC puts: ~10 s alone in Release; the bound is for a hang,
# and an ASan build beside other suites on 2 cores took over 40 s)
seeds_of n1 n2 n3
client put1 120000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" put --count $N --round 1
# a failed put makes every later step meaningless: stop here
[[ $CLIENT_RC == 0 ]] || die "put1: not every put was acknowledged"
log "ok: put1: all $N puts acknowledged"
wait_until 10000 "the client left: n1, n2, n3 agree on 3 nodes" agree_nodes 3 n1 n2 n3

victim=n${DG_VICTIM:-$((RANDOM % 3 + 1))}
[[ -n ${PORT_OF[$victim]:-} ]] || die "DG_VICTIM must be 1, 2 or 3"
surv=()
for n in n1 n2 n3; do
	[[ $n == "$victim" ]] || surv+=("$n")
done
log "2. kill -9 $victim (id ${ID[$victim]}; set DG_VICTIM=${victim#n} to repeat)"
kill_and_wait "$victim" "${surv[@]}"
verify verify1 1 "${surv[@]}"

log "3. put round 2 on ${surv[*]}, 100 keys per put_all"
seeds_of "${surv[@]}"
client put2 120000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" put --count $N --round 2 --batch 100
[[ $CLIENT_RC == 0 ]] || die "put2: not every put was acknowledged"
log "ok: put2: all $N puts acknowledged"
wait_until 10000 "the client left: ${surv[*]} agree on 2 nodes" agree_nodes 2 "${surv[@]}"

re=${victim}r
log "4. restart $victim as $re on ${URL[$victim]}, in memory"
seeds_of "${surv[@]}"
start_dgnode "$re" "${PORT_OF[$victim]}" "${NODE_ARGS[@]}" "${SEEDS[@]}"
wait_dgnode "$re"
check "$re is a new node (id ${ID[$re]} != ${ID[$victim]})" test "${ID[$re]}" != "${ID[$victim]}"
wait_until 10000 "${surv[*]} and $re agree on 3 nodes" agree_nodes 3 "${surv[@]}" "$re"
wait_until 30000 "$re logs REBALANCE-DONE" has_log "$re" ' id=REBALANCE-DONE '
log "$re: $(grep -m1 ' id=REBALANCE-DONE ' "$WORK/$re.err") ($WAITED_MS ms after the 3-node topology)"
VERIFY_ARGS=(--batch 100)
verify verify2 2 "${surv[@]}" "$re"
wait_until 10000 "the client left: 3 nodes again" agree_nodes 3 "${surv[@]}" "$re"

log "5. kill -9 another original node, ${surv[0]}"
kill_and_wait "${surv[0]}" "${surv[1]}" "$re"
verify verify3 2 "${surv[1]}" "$re"
VERIFY_ARGS=()
wait_until 10000 "the client left: 2 nodes again" agree_nodes 2 "${surv[1]}" "$re"

last=${surv[1]}
log "6. kill -9 the last original node, $last: $re alone of two voters"
now_ms
t_kill=$NOW
kill9_node "$last"
# under partition_policy=majority one of two voters is no majority: it
# removes nobody and refuses (DG_ERR_SEGMENTED) rather than go on alone
wait_until 10000 "$re logs SEGMENTED" has_log "$re" ' id=SEGMENTED '
check "$re removed nobody (no NODE-FAILED for $last)" lacks_log "$re" " id=NODE-FAILED node=${ID[$last]} "
lr=${last}r
log "7. restart $last as $lr on ${URL[$last]}, in memory: the two go on"
start_dgnode "$lr" "${PORT_OF[$last]}" "${NODE_ARGS[@]}" --seed "${URL[$re]}"
wait_dgnode "$lr"
wait_until 10000 "$re logs REJOINED" has_log "$re" ' id=REJOINED '
wait_until 30000 "$lr logs REBALANCE-DONE" has_log "$lr" ' id=REBALANCE-DONE '
verify verify4 2 "$re" "$lr"
seeds_of "$re" "$lr"
client size4 20000 "${SEEDS[@]}" --cache "$CACHE" size
check "size4: $re and $lr hold $N entries" grep -q -x "size $N" "$WORK/size4.out"
check "$re logged no PARTITION-LOST" lacks_log "$re" ' id=PARTITION-LOST '

stop_all_checked
finish
