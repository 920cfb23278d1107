#!/usr/bin/env bash
# partition_netns: issue 13 — network partitions.  Five dgnode servers and
# two client hosts, each a network namespace on one bridge (netnslib.sh),
# under a nemesis of network faults; per key the register histories stay
# linearizable, the bank keeps every acknowledged transfer and applies no
# failed one, the side without a majority refuses with DG_ERR_SEGMENTED,
# and after each heal the cluster is one again by itself.
#
#   bash partition_netns.sh DGNODE CACHECLIENT DGCTL DGLINZ [--minutes M]
#
#  0. hosts s1..s5 (a dgnode each on SUBNET.i:47500, all five as seeds,
#     failure-detection-timeout 1000 ms, partition-policy majority) and c1,
#     c2 (the clients); caches, partitioned, backups=2, FULL_SYNC:
#       reg_atomic ATOMIC, reg_tx TRANSACTIONAL, bank TRANSACTIONAL;
#  1. per client host: a register-run client on reg_atomic and on reg_tx
#     (one history file each) for RUN_S seconds (60; --minutes M: M*60);
#     and bank-init and a bank-run client per host (c1 pess-rr, c2
#     opt-ser with --batch-reads; DG_PART_BANK=0 leaves the bank out);
#  2. the nemesis, every few seconds (seeded), one of:
#       split      two random servers and one client host cut from the
#                  other three servers and the other client host, both
#                  ways, for 5-9 s;
#       coord      the coordinator (dgctl state) cut from every host;
#       oneway     a random server's packets to every other host dropped
#                  (it still receives theirs);
#       flap       the link between two servers cut and healed every
#                  0.3-0.7 s for 6 s;
#       pause      SIGSTOP a random server for 2.5-4 s (longer than the
#                  failure timeout), then SIGCONT;
#     then heals, and waits (30 s at most) for the five servers and the
#     live clients to agree on one topology: one cluster again; then
#     (30 s at most) for rebalancing to complete, and 2-4 s whole before
#     the next event (the first event too waits for a rebalanced cluster:
#     a partition cut off while its only whole copies are being fetched is
#     LOST on the majority until reset, node/DEPLOY.md);
#  3. the clients end by themselves; the servers settle on five; dgctl
#     idle-verify: no divergent partition; no PARTITION-LOST;
#  4. verdicts: dglinz on each register cache's histories (linearizable);
#     the bank clients saw no violation and bank-verify
#     passes; the client cut into a minority got DG_ERR_SEGMENTED.
# Knobs: DG_PART_SEED=N (the nemesis's and clients' seed, printed),
# DG_PART_SECONDS=S, DG_PART_NEMESIS=split|coord|oneway|flap|pause|all,
# DG_PART_BANK=0 (no bank workload).
# Needs root and iproute2 (exit 77 otherwise).  The EXIT trap kills every
# process and deletes every namespace (netnslib.sh), whatever happens.
# shellcheck disable=SC2054,SC2317  # cache specs have commas; functions run via wait_until
set -euo pipefail

ARGS=("$@")
LINZ=${ARGS[3]:-}
MINUTES=""
if ((${#ARGS[@]} > 4)); then
	[[ ${ARGS[4]} == --minutes && -n ${ARGS[5]:-} ]] ||
		{ echo "usage: $0 DGNODE CACHECLIENT DGCTL DGLINZ [--minutes M]" >&2; exit 2; }
	MINUTES=${ARGS[5]}
	[[ $MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "--minutes: a positive integer" >&2; exit 2; }
fi
RUN_S=${DG_PART_SECONDS:-60}
[[ -z $MINUTES ]] || RUN_S=$((MINUTES * 60))
: "${DG_TEST_BUDGET_MS:=$(((RUN_S + 110) * 1000))}"
export DG_TEST_BUDGET_MS
set -- "${ARGS[@]:0:2}"
source "$(dirname "$0")/cachelib.sh"
source "$(dirname "$0")/netnslib.sh"
DGCTL=${ARGS[2]:-}
[[ -x $DGCTL ]] || die "dgctl not executable: $DGCTL"
[[ -x $LINZ ]] || die "the checker is not executable: $LINZ"
command -v jq >/dev/null || skip "no jq (apt-get install jq)"

FT=1000
PORT=47500
SEED=${DG_PART_SEED:-$(((RANDOM << 15) | RANDOM))}
RNG=$SEED
NEMESIS=${DG_PART_NEMESIS:-all}
[[ $NEMESIS =~ ^(split|coord|oneway|flap|pause|all)$ ]] || die "DG_PART_NEMESIS: split, coord, oneway, flap, pause or all"
BANK_ON=${DG_PART_BANK:-1}
SRVH=(s1 s2 s3 s4 s5)
CLIH=(c1 c2)
CACHE_ARGS=(
	--cache reg_atomic,mode=partitioned,backups=2,sync=full_sync,atomicity=atomic
	--cache reg_tx,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional
	--cache bank,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional
)
COMMON=(--failure-detection-timeout "$FT" --request-timeout 5000)
PAUSED=""

part_cleanup() {
	local rc=$?
	set +e
	[[ -z $PAUSED || -z ${PID[$PAUSED]:-} ]] || kill -CONT "${PID[$PAUSED]}" 2>/dev/null
	netns_heal_all
	(exit "$rc")
	cleanup
}
trap part_cleanup EXIT

netns_hosts "dgp$$" "10.232.$(($$ % 256))" "${SRVH[@]}" "${CLIH[@]}"
log "seed $SEED (DG_PART_SEED=$SEED repeats the nemesis), run ${RUN_S} s, nemesis $NEMESIS;" \
	"namespaces ${NS_MADE[*]}"
if command -v ping >/dev/null; then
	wait_until 10000 "the hosts ping each other over the bridge" netns_pings "${SRVH[@]}" "${CLIH[@]}"
fi

SEEDS=()
for h in "${SRVH[@]}"; do
	URL[$h]=tcp://${IP[$h]}:$PORT
	SEEDS+=(--seed "${URL[$h]}")
done
for h in "${SRVH[@]}"; do
	start_proc "$h" ip netns exec "${NS[$h]}" "$DGNODE" --listen "${URL[$h]}" "${SEEDS[@]}" \
		--failure-detection-timeout "$FT" --partition-policy majority "${CACHE_ARGS[@]}"
done
for h in "${SRVH[@]}"; do
	wait_dgnode "$h" 30000
done
CLIENTS=()
wait_until 20000 "the five servers agree on one topology" servers_agree "${SRVH[@]}"
log "cluster up across the namespaces: version=$AGREED_V"
# rebalanced: every partition of every cache OWNING where it belongs, as
# s1's dgctl says.  The nemesis strikes a settled cluster: a cut while a
# partition's only whole copies are still being fetched leaves it LOST on
# the majority until reset (node/DEPLOY.md, "Network partitions"), which
# is not what this test checks.
rebalanced() {
	local out
	out=$(timeout -k 1 5 ip netns exec "${NS[s1]}" "$DGCTL" --url "tcp://${IP[s1]}:$((PORT + 100))" \
		rebalance status --json 2>/dev/null) && jq -e '.complete == true' >/dev/null <<<"$out"
}
wait_until 30000 "rebalancing complete before the workload" rebalanced

# client NAME HOST cacheclient-args...: a cacheclient in HOST's namespace
# (a client node on HOST's address), in the background.
client_bg() {
	local name=$1 h=$2
	shift 2
	start_proc "$name" ip netns exec "${NS[$h]}" "$CACHECLIENT" --listen "tcp://${IP[$h]}:0" \
		"${SEEDS[@]}" "${COMMON[@]}" "$@"
}
# client_fg NAME HOST TIMEOUT_MS args...: the same, waited for; CLIENT_RC.
client_fg() {
	local name=$1 h=$2 timeout=$3 line
	shift 3
	client_bg "$name" "$h" "$@"
	wait_exit "$name" "$timeout"
	CLIENT_RC=${RC[$name]}
	while IFS= read -r line; do
		[[ $line == PROGRESS* ]] || log "  $name: $line"
	done <"$WORK/$name.out"
	log "$name exited $CLIENT_RC after $WAITED_MS ms"
}

if ((BANK_ON)); then
	log "1. bank-init, then the workload: 2 register clients x 2 caches, 2 bank clients, ${RUN_S} s"
	client_fg bank_init c1 40000 --cache bank --duration 30 bank-init
	[[ $CLIENT_RC == 0 ]] || die "bank-init failed"
	wait_until 10000 "the init client left" servers_agree "${SRVH[@]}"
else
	log "1. the workload: 2 register clients x 2 caches, ${RUN_S} s (DG_PART_BANK=0: no bank)"
fi
k=0
for h in "${CLIH[@]}"; do
	for cache in reg_atomic reg_tx; do
		k=$((k + 1))
		name=${cache#reg_}_$h
		client_bg "$name" "$h" --cache "$cache" register-run --duration "$RUN_S" \
			--client-id "$name" --threads 4 --keys 10 --mix 2:1:1 --pause-us 5000 \
			--rand-seed $((SEED * 16 + k)) --history "$WORK/hist.$cache.$h"
		CLIENTS+=("$name")
	done
	((BANK_ON)) || continue
	k=$((k + 1))
	mode=opt-ser extra=(--batch-reads)
	[[ $h != c1 ]] || { mode=pess-rr; extra=(--ordered); }
	client_bg "bank_$h" "$h" --cache bank --timeout-ms 2000 bank-run --duration "$RUN_S" \
		--threads 3 --stall-ms 30000 --mode "$mode" --client-id "$h" \
		--rand-seed $((SEED * 16 + k)) --ok-log "$WORK/bank_$h.ok" \
		--fail-log "$WORK/bank_$h.fail" "${extra[@]}"
	CLIENTS+=("bank_$h")
done
wait_until 30000 "every client starts its workload" clients_started
now_ms
RUN_END=$((NOW + RUN_S * 1000))

# ---- the nemesis ----
EVENTS=()
MINORITY_CLIENT=""   # a client host that was on a minority side
cut_two_ways() { netns_cut "$1" "$2"; netns_cut "$2" "$1"; }
# one_cluster: the five servers and every live client on one topology
one_cluster() { servers_agree "${SRVH[@]}"; }
heal_and_wait() {
	local t0
	netns_heal_all
	now_ms
	t0=$NOW
	wait_until 30000 "one cluster again after: $1" one_cluster
	now_ms
	log "nemesis: healed ($1): one cluster again in $((NOW - t0)) ms, version=$AGREED_V"
	EVENTS+=("$1: whole again in $((NOW - t0)) ms")
	t0=$NOW
	wait_until 30000 "rebalancing complete after: $1" rebalanced
	now_ms
	log "nemesis: rebalanced $((NOW - t0)) ms later"
}
hold() { rng $(($2 - $1 + 1)); sleep "$(($1 + R))"; }
pick_servers() { # PICKED: $1 distinct random servers; REST: the others
	local -a pool=("${SRVH[@]}")
	PICKED=()
	while ((${#PICKED[@]} < $1)); do
		rng ${#pool[@]}
		PICKED+=("${pool[R]}")
		pool=("${pool[@]:0:R}" "${pool[@]:R+1}")
	done
	REST=("${pool[@]}")
}
coordinator_host() { # COORD: the coordinator's host (a client node's too:
	# the oldest member coordinates, and a server that rejoined is younger
	# than the clients), as a server's dgctl state says
	local out h a
	COORD=""
	for h in "${SRVH[@]}"; do
		out=$(timeout -k 1 5 ip netns exec "${NS[$h]}" "$DGCTL" \
			--url "tcp://${IP[$h]}:$((PORT + 100))" state --json 2>/dev/null) || continue
		a=$(jq -r '.coordinator_address // empty' <<<"$out")
		for h in "${SRVH[@]}" "${CLIH[@]}"; do
			[[ $a != tcp://"${IP[$h]}":* ]] || COORD=$h
		done
		[[ -z $COORD ]] || return 0
	done
	return 1
}

n_split() {
	local a b x y
	pick_servers 2
	rng 2
	local minc=${CLIH[R]} majc=${CLIH[1 - R]}
	log "nemesis: split: ${PICKED[*]} + $minc | ${REST[*]} + $majc"
	for a in "${PICKED[@]}" "$minc"; do
		for b in "${REST[@]}" "$majc"; do
			cut_two_ways "$a" "$b"
		done
	done
	MINORITY_CLIENT+=" $minc"
	hold 5 9
	heal_and_wait "split ${PICKED[*]} $minc | ${REST[*]} $majc"
}
n_coord() {
	local h
	coordinator_host || { log "nemesis: coord: no coordinator found (dgctl): skipped"; return 0; }
	log "nemesis: coord: $COORD (the coordinator's host) cut from every host"
	for h in "${SRVH[@]}" "${CLIH[@]}"; do
		[[ $h == "$COORD" ]] || cut_two_ways "$COORD" "$h"
	done
	hold 5 8
	heal_and_wait "coordinator $COORD isolated"
}
n_oneway() {
	local h
	pick_servers 1
	log "nemesis: oneway: ${PICKED[0]} cannot send to anyone"
	for h in "${SRVH[@]}" "${CLIH[@]}"; do
		[[ $h == "${PICKED[0]}" ]] || netns_cut "${PICKED[0]}" "$h"
	done
	hold 5 8
	heal_and_wait "one-way from ${PICKED[0]}"
}
n_flap() {
	local end
	pick_servers 2
	log "nemesis: flap: ${PICKED[0]} <-> ${PICKED[1]}"
	now_ms
	end=$((NOW + 6000))
	while ((NOW < end)); do
		cut_two_ways "${PICKED[0]}" "${PICKED[1]}"
		rng 5
		sleep "0.$((3 + R))"
		netns_heal_all
		rng 5
		sleep "0.$((3 + R))"
		now_ms
	done
	heal_and_wait "flapping ${PICKED[0]} <-> ${PICKED[1]}"
}
n_pause() {
	pick_servers 1
	PAUSED=${PICKED[0]}
	log "nemesis: pause: SIGSTOP $PAUSED"
	kill -STOP "${PID[$PAUSED]}"
	rng 1501
	sleep "$(((2500 + R) / 1000)).$(printf '%03d' $(((2500 + R) % 1000)))"
	kill -CONT "${PID[$PAUSED]}"
	PAUSED=""
	heal_and_wait "pause of ${PICKED[0]}"
}

log "2. the nemesis until $((RUN_S - 12)) s"
KINDS=(split coord oneway flap pause)
n=0
while :; do
	now_ms
	((NOW + 12000 < RUN_END)) || break
	if [[ $NEMESIS == all ]]; then
		# the first two are a split and an isolated coordinator: every run
		# has a minority with a client and a coordinator cut off
		if ((n < 2)); then kind=${KINDS[n]}; else rng 5; kind=${KINDS[R]}; fi
	else
		kind=$NEMESIS
	fi
	n=$((n + 1))
	"n_$kind"
	# 2-4 s whole: the side that was cut off commits again before the next
	# event (the bank's "no 30 s without a commit" holds when three splits
	# in a row leave the same client in the minority)
	rng 3
	sleep $((2 + R))
done
log "nemesis over: $n events"

clients_alive() {
	local c
	for c in "${CLIENTS[@]}"; do
		! alive "$c" || return 0
	done
	return 1
}
now_ms
wait_until $((RUN_END - NOW + 45000)) "every client exits" eval '! clients_alive'
SEG_SEEN=0
for c in "${CLIENTS[@]}"; do
	reap "$c"
	while IFS= read -r line; do
		[[ $line == PROGRESS* ]] || log "  $c: $line"
	done <"$WORK/$c.out"
	check "$c: ended by itself, no violation seen (exit ${RC[$c]})" test "${RC[$c]}" = 0
	if [[ $c == bank_* ]]; then
		check "$c: transfers committed throughout (no 30 s without one)" grep -q ' stalls=0 ' "$WORK/$c.out"
	fi
	for h in $MINORITY_CLIENT; do
		[[ $c != *_"$h" ]] || ! grep -q 'errors=.*DG_ERR_SEGMENTED' "$WORK/$c.out" || SEG_SEEN=1
	done
done
CLIENTS=()

log "3. settle and verify"
wait_until 30000 "the five servers agree on five nodes" agree_nodes 5 "${SRVH[@]}"
log "settled: version=$AGREED_V"
iv_ok() {
	OUT=$(timeout -k 2 60 ip netns exec "${NS[s1]}" "$DGCTL" --url "tcp://${IP[s1]}:$((PORT + 100))" \
		idle-verify --json 2>"$WORK/idle-verify.err") && jq -e '.divergent_count == 0' >/dev/null <<<"$OUT"
}
# idle-verify until the copies agree (30 s: rebalancing ends); a divergence
# that stays is a failed verdict with the copies listed (the histories and
# the bank are still checked below)
now_ms
iv_end=$((NOW + 30000))
until iv_ok; do
	now_ms
	((NOW < iv_end)) || break
	sleep 0.5
done
if jq -e '.divergent_count == 0' >/dev/null 2>&1 <<<"$OUT"; then
	log "ok: idle-verify: $(jq -c '{partitions_checked, partitions_skipped, divergent_count}' <<<"$OUT")"
else
	printf '%s\n' "$OUT" >"$WORK/idle-verify.json"
	check "idle-verify: every partition's copies agree 30 s after the last heal" false
	jq -r '.divergent[:10][] | "\(.cache) partition \(.partition): " + ([.copies[] | "\(.node) \(.role) \(.state) entries=\(.entries) digest=\(.digest)"] | join("; "))' \
		<<<"$OUT" 2>/dev/null | while IFS= read -r line; do log "    $line"; done || true
fi
for h in "${SRVH[@]}"; do
	check "$h logged no PARTITION-LOST" lacks_log "$h" ' id=PARTITION-LOST '
done

log "4. verdicts"
for cache in reg_atomic reg_tx; do
	rc=0
	timeout -k 2 60 "$LINZ" "$WORK"/hist."$cache".* >"$WORK/linz.$cache.out" 2>&1 || rc=$?
	grep -E '^dglinz:' "$WORK/linz.$cache.out" | while IFS= read -r line; do log "  $line"; done
	((rc == 0)) || awk 'n < 40 {print; n++}' "$WORK/linz.$cache.out" |
		while IFS= read -r line; do log "  dglinz: $line"; done
	check "$cache: linearizable (dglinz exit $rc)" test "$rc" = 0
done
if ((BANK_ON)); then
	client_fg bank_verify c1 60000 --cache bank --duration 30 bank-verify \
		--ok-log "$WORK/bank_c1.ok" --fail-log "$WORK/bank_c1.fail" \
		--ok-log "$WORK/bank_c2.ok" --fail-log "$WORK/bank_c2.fail"
	check "bank-verify: total, every acknowledged transfer there, no failed one applied" \
		test "$CLIENT_RC" = 0
fi
if [[ -n $MINORITY_CLIENT ]]; then
	check "a client cut into a minority got DG_ERR_SEGMENTED" test "$SEG_SEEN" = 1
fi
for h in "${SRVH[@]}"; do
	log "  $h: $(grep -c ' id=SEGMENTED ' "$WORK/$h.err" || true) SEGMENTED," \
		"$(grep -c ' id=REJOINED ' "$WORK/$h.err" || true) REJOINED," \
		"$(grep -c ' id=TOPOLOGY-AGREED ' "$WORK/$h.err" || true) versions agreed"
done
log "events:"
for e in "${EVENTS[@]}"; do
	log "  $e"
done
stop_all_checked
finish
