#!/usr/bin/env bash
# three_nodes_join: a first node forms a cluster alone; two more, started at
# once, join through it.  All three print the same final TOPOLOGY: one
# version, three ids in one order, the first node (the coordinator, order 1)
# first.  Then a graceful stop (SIGTERM: LEAVE) of the last node is seen by
# the other two at once, without waiting for failure detection.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

start_node n1
wait_ready n1
start_node n2 --seed "${ADDR[n1]}"
start_node n3 --seed "${ADDR[n1]}"
wait_ready n2
wait_ready n3

wait_until 10000 "n1, n2, n3 agree on a 3-node topology" agree_count 3 n1 n2 n3
log "agreed after ${WAITED_MS} ms: version=$AGREED_V nodes=$AGREED_N"
IFS=, read -r -a order <<<"$AGREED_N"
check "the first node is first in the order (coordinator)" test "${order[0]}" = "${ID[n1]}"
sorted_topo=$(printf '%s\n' "${order[@]}" | sort | tr '\n' ' ')
sorted_ready=$(printf '%s\n' "${ID[n1]}" "${ID[n2]}" "${ID[n3]}" | sort | tr '\n' ' ')
check "the topology holds exactly the three READY ids" test "$sorted_topo" = "$sorted_ready"
check "version 3: formed (1) + two joins" test "$AGREED_V" = 3
for n in n1 n2 n3; do
	check "$n printed versions in increasing order" \
		eval "grep '^TOPOLOGY ' '$WORK/$n.out' | sed 's/ nodes=.*//; s/.*=//' | sort -n -c"
done

# Graceful leave of n3: the others drop it at once (LEAVE), not after the
# 10 s failure timeout.
gone=$(printf '%s,' "${order[@]}" | sed "s/${ID[n3]},//; s/,\$//")
stop_node n3
check "n3 exits 0 on SIGTERM (got ${RC[n3]})" test "${RC[n3]}" = 0
wait_until 5000 "n1, n2 agree on the topology without n3" agree "$gone" n1 n2
log "n1, n2 dropped the leaving n3 ${WAITED_MS} ms after its exit: version=$AGREED_V nodes=$gone"
check "version 4 after the leave" test "$AGREED_V" = 4

stop_all_checked
finish
