#!/usr/bin/env bash
# kill9_detected: failure detection with --failure-timeout 1000.
#  1. A 3-node cluster; kill -9 a non-coordinator (the second in order, the
#     coordinator's successor).  The two survivors print the same new
#     TOPOLOGY (2 nodes, the dead id gone, order kept) within timeout + 1 s
#     of the kill.
#  2. A fresh 3-node cluster; kill -9 the coordinator (first id in the
#     list).  The next in order takes over; the survivors agree on the same
#     2-node TOPOLOGY within timeout + 1 s.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

FT=1000
LIMIT=$((FT + 1000))

# cluster A B C: starts three nodes (B and C seed A), waits for agreement;
# sets ORDER (array of ids by order) and BYID (id -> node name).
declare -A BYID=()
cluster() {
	local a=$1 b=$2 c=$3 n
	start_node "$a" --failure-timeout $FT
	wait_ready "$a"
	start_node "$b" --failure-timeout $FT --seed "${ADDR[$a]}"
	start_node "$c" --failure-timeout $FT --seed "${ADDR[$a]}"
	wait_ready "$b"
	wait_ready "$c"
	wait_until 10000 "$a, $b, $c agree on a 3-node topology" agree_count 3 "$a" "$b" "$c"
	log "cluster up: version=$AGREED_V nodes=$AGREED_N"
	IFS=, read -r -a ORDER <<<"$AGREED_N"
	for n in "$a" "$b" "$c"; do
		BYID[${ID[$n]}]=$n
	done
}

# kill_and_measure VICTIM_ID: kill -9 the node, wait until the two
# survivors print the topology without it, check the delay.
kill_and_measure() {
	local victim_id=$1 victim=${BYID[$1]} before=$AGREED_V id
	local -a rest=() survivors=()
	for id in "${ORDER[@]}"; do
		if [[ $id != "$victim_id" ]]; then
			rest+=("$id")
			survivors+=("${BYID[$id]}")
		fi
	done
	local want
	want=$(IFS=,; echo "${rest[*]}")
	now_ms
	local t_kill=$NOW
	kill9_node "$victim"
	log "kill -9 $victim (id $victim_id, position $(pos "$victim_id") of 3)"
	# wait up to 10 s so a slow detection is measured, not just refused
	wait_until 10000 "${survivors[*]} agree on $want" agree "$want" "${survivors[@]}"
	now_ms
	local took=$((NOW - t_kill))
	log "${survivors[*]} agree on version=$AGREED_V nodes=$want, $took ms after the kill"
	check "detected within failure timeout + 1 s ($took ms <= $LIMIT ms)" test "$took" -le "$LIMIT"
	# The coordinator may remove the node twice when a NODE_FAILED report and
	# its own tick race (membership.c tick: stale snapshot; change() bumps
	# the version even when nothing is dropped): a spurious version.
	check "one new version for one failure ($before -> $AGREED_V)" \
		test "$AGREED_V" = $((before + 1))
}
pos() {
	local i
	for i in "${!ORDER[@]}"; do
		[[ ${ORDER[i]} == "$1" ]] && echo $((i + 1))
	done
}

log "part 1: kill -9 a non-coordinator"
cluster a1 a2 a3
kill_and_measure "${ORDER[1]}"
stop_all_checked

log "part 2: kill -9 the coordinator of a fresh cluster"
cluster b1 b2 b3
coord=${ORDER[0]}
check "the first node started is the coordinator" test "$coord" = "${ID[b1]}"
kill_and_measure "$coord"
topo "${BYID[${ORDER[1]}]}"
check "the next in order (${ORDER[1]}) leads the new topology" test "${TN%%,*}" = "${ORDER[1]}"
stop_all_checked
finish
