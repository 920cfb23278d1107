#!/usr/bin/env bash
# restart_joins: a server killed -9 and started again on its address a
# moment later joins the cluster, every time, while transactions run
# (issue 12, defect 10: such restarts sometimes ended in JOIN-FAIL ...
# DG_ERR_TIMEOUT).  Each kill takes the coordinator — the oldest server:
# the load clients of a round join after every server of the round's start
# — so the restarted node's JOIN meets a cluster whose coordinator is the
# node it replaces, at the address it now listens on.
#  1. 3 dgnode servers (started one after the other: n1 is the oldest),
#     failure-detection-timeout 1000 ms, the cache `bank` (partitioned,
#     backups=2, FULL_SYNC, transactional); bank-init;
#  2. rounds: two bank-run clients (pess-rr and opt-ser) run ROUND_S
#     seconds; while they run, kill -9 the oldest server, start it again
#     on the same port (seeded by the two others) DELAY ms after the kill —
#     odd restarts FAST_MS (300: before the others noticed the death), even
#     ones DELAY_MS (2000: about when they just dropped it) — and require
#     NODE-READY within JOIN_MS (10 s, dgnode's join timeout); then it
#     rebalances and every node agrees on one topology before the next kill.
#     A start that did not join (JOIN-FAIL, or any exit) is counted and the
#     node started again so the run goes on; so is one that joined late;
#  3. RESTARTS restarts in all, each joined at its first start in time.
# Knobs: DG_RESTART_N (restarts, default 6), DG_RESTART_FAST_MS (300),
# DG_RESTART_DELAY_MS (2000), DG_RESTART_JOIN_MS (10000).
set -euo pipefail
RESTARTS=${DG_RESTART_N:-6}
FAST_MS=${DG_RESTART_FAST_MS:-300}
DELAY_MS=${DG_RESTART_DELAY_MS:-2000}
JOIN_MS=${DG_RESTART_JOIN_MS:-10000}
ROUND_S=12
# the script's own deadline: setup, then about 10 s a restart (ctest's
# TIMEOUT is 240 s for the default 6)
: "${DG_TEST_BUDGET_MS:=$((60000 + RESTARTS * 20000))}"
export DG_TEST_BUDGET_MS
source "$(dirname "$0")/cachelib.sh"

grep -q 'atomicity=atomic|transactional' <<<"$("$DGNODE" --help 2>/dev/null)" ||
	skip "this dgnode has no transactional caches (no atomicity= in --help)"

FT=1000
CACHE=bank
NODE_ARGS=(--failure-detection-timeout "$FT"
	--cache "$CACHE,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional")
CLIENT_ARGS=(--cache "$CACHE" --failure-detection-timeout "$FT" --timeout-ms 2000)
SRV=(n1 n2 n3)    # the current server of each slot
AGE=(0 1 2)       # the slots, oldest server first
declare -A PORT_OF=()
CLIENTS=()        # the running round's clients
STARTS=0          # dgnode starts after a kill
RESTARTED=0
BAD=0             # starts that did not join in time
BAD_LIST=()

past() { now_ms; ((NOW >= $1)); }
clients_alive() {
	local c
	for c in "${CLIENTS[@]}"; do
		alive "$c" || return 1
	done
}

# start_again SLOT: starts the slot's server on its port, seeded by the
# others; JOINED=1 when it logged NODE-READY within JOIN_MS, else 0.
start_again() {
	local slot=$1 new
	STARTS=$((STARTS + 1))
	new=s$((slot + 1))r$STARTS
	others "$slot"
	seeds_of "${OTHERS[@]}"
	start_dgnode "$new" "${PORT_OF[$slot]}" "${NODE_ARGS[@]}" "${SEEDS[@]}"
	SRV[slot]=$new
	JOINED=0
	# twice the bound, to tell a late join from none
	wait_until $((2 * JOIN_MS + 5000)) "$new NODE-READY or exit" dg_ready_or_dead "$new"
	if has_log "$new" ' id=NODE-READY '; then
		log "$new joined ${WAITED_MS} ms after its start"
		((WAITED_MS <= JOIN_MS)) && JOINED=1
		return 0
	fi
	reap "$new"
	log "$new did not join: exit ${RC[$new]} after ${WAITED_MS} ms:" \
		"$(grep -E 'level=error' "$WORK/$new.err" | tail -n 3 | tr '\n' ' ')"
}

# kill_restart DELAY: kill -9 the oldest server (the coordinator), start it
# again DELAY ms later (until it joins: every start that did not join in
# time is counted), wait until it rebalanced and every node agrees.
kill_restart() {
	local delay=$1 slot=${AGE[0]} old t_kill tries=0
	old=${SRV[slot]}
	RESTARTED=$((RESTARTED + 1))
	now_ms
	t_kill=$NOW
	log "restart $RESTARTED: kill -9 $old (id ${ID[$old]}, the coordinator), start again in $delay ms"
	kill9_node "$old"
	wait_until $((delay + 1000)) "$delay ms after the kill" past $((t_kill + delay))
	while :; do
		start_again "$slot"
		((JOINED)) && break
		BAD=$((BAD + 1))
		BAD_LIST+=("${SRV[slot]}")
		alive "${SRV[slot]}" && break # joined, but late
		tries=$((tries + 1))
		((tries < 3)) || die "${SRV[slot]}: 3 starts in a row did not join"
	done
	AGE=("${AGE[@]:1}" "$slot")
	wait_dgnode "${SRV[slot]}" 1000
	wait_until 30000 "${SRV[slot]} logs REBALANCE-DONE" has_log "${SRV[slot]}" ' id=REBALANCE-DONE '
	wait_until 20000 "${SRV[*]} agree on one topology" servers_agree "${SRV[@]}"
	now_ms
	log "restart $RESTARTED: ${SRV[slot]} in (version=$AGREED_V), $((NOW - t_kill)) ms after the kill"
}

log "$RESTARTS restarts of the coordinator, $FAST_MS or $DELAY_MS ms after its kill"
for i in 0 1 2; do
	free_port
	PORT_OF[$i]=$PORT
done
start_dgnode n1 "${PORT_OF[0]}" "${NODE_ARGS[@]}"
wait_dgnode n1
start_dgnode n2 "${PORT_OF[1]}" "${NODE_ARGS[@]}" --seed "${URL[n1]}"
wait_dgnode n2
start_dgnode n3 "${PORT_OF[2]}" "${NODE_ARGS[@]}" --seed "${URL[n1]}"
wait_dgnode n3
wait_until 10000 "n1, n2, n3 agree on a 3-node topology" agree_nodes 3 n1 n2 n3

log "1. bank-init"
seeds_of n1 n2 n3
client init 40000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" --duration 30 bank-init
[[ $CLIENT_RC == 0 ]] || die "bank-init failed: no load to run"
wait_until 10000 "the init client left" servers_agree "${SRV[@]}"

round=0
while ((RESTARTED < RESTARTS)); do
	round=$((round + 1))
	log "2.$round the load: clients p$round (pess-rr) and o$round (opt-ser) for $ROUND_S s"
	seeds_of "${SRV[@]}"
	CLIENTS=(p$round o$round)
	for c in "${CLIENTS[@]}"; do
		mode=pess-rr
		[[ $c == p* ]] || mode=opt-ser
		start_proc "$c" "$CACHECLIENT" "${SEEDS[@]}" "${CLIENT_ARGS[@]}" bank-run \
			--duration "$ROUND_S" --threads 3 --stall-ms 0 --mode "$mode" --client-id "$c" \
			--ok-log "$WORK/$c.ok" --fail-log "$WORK/$c.fail"
	done
	started() { has_line "p$round" '^bank-run client=' && has_line "o$round" '^bank-run client='; }
	wait_until 20000 "both clients start their transfers" started
	wait_until 10000 "${SRV[*]} see the two clients" servers_agree "${SRV[@]}"
	now_ms
	round_end=$((NOW + ROUND_S * 1000 - 4000))
	# at most 3 kills a round: every server older than the clients
	for ((k = 0; k < 3 && RESTARTED < RESTARTS; k++)); do
		now_ms
		((NOW < round_end)) && clients_alive || break
		delay=$DELAY_MS
		((RESTARTED % 2 == 1)) || delay=$FAST_MS
		kill_restart "$delay"
	done
	wait_until 40000 "the round's clients end" eval '! alive p$round && ! alive o$round'
	for c in "${CLIENTS[@]}"; do
		reap "$c"
		log "  $c exited ${RC[$c]}: $(grep -m1 '^bank-run summary' "$WORK/$c.out" || true)"
	done
	CLIENTS=()
	wait_until 20000 "the clients left" servers_agree "${SRV[@]}"
done

log "3. every restart joined"
for n in "${BAD_LIST[@]}"; do
	log "  $n: $(grep -E 'level=(error|warn) id=(JOIN|NODE-START)' "$WORK/$n.err" | tail -n 4 | tr '\n' ' ')"
done
check "all $RESTARTS restarts joined within $JOIN_MS ms of their first start ($BAD starts did not)" \
	test "$BAD" = 0
stop_all_checked
finish
