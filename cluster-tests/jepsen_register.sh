#!/usr/bin/env bash
# jepsen_register: issue 12's Jepsen-style harness.  Per key, reads, writes
# and compare-and-sets on a FULL_SYNC cache are linearizable, and no
# acknowledged write is lost, while servers are killed -9 and paused; the
# bank invariant holds meanwhile (optional); every copy agrees afterwards.
#
#   bash jepsen_register.sh DGNODE CACHECLIENT DGCTL DGLINZ [--servers N]
#        [--minutes M]
#
#  0. S servers (3; --servers 5), failure-detection-timeout 1000 ms, each
#     with its own --data-dir and --storage-sync, caches (partitioned,
#     backups=2, FULL_SYNC):
#       reg_atomic   ATOMIC
#       reg_tx       TRANSACTIONAL
#       reg_persist  ATOMIC, persistence=true
#       bank         TRANSACTIONAL (only with the bank workload on)
#  1. two cacheclient register-run clients per register cache (a and b:
#     distinct client ids, one history file per client, $WORK/hist.<cache>.<c>)
#     for RUN_S seconds (90; --minutes M: M*60), and with DG_JEPSEN_BANK=1
#     (the default of a soak) bank-init and two bank-run clients (pess-rr,
#     opt-ser) on `bank`;
#  2. the nemesis, meanwhile, every 5-8 s (seeded): kill -9 a random server
#     and restart it on its address with its data dir, waiting for it to
#     rejoin and the cluster to finish rebalancing; or SIGSTOP a random
#     server for 1.5-4 s (longer than the failure timeout: the others drop
#     it) then SIGCONT, and wait (20 s) for it to be back in the cluster by
#     itself.  A node that does not come back is a failed check (the
#     FINDING line says what its log shows); the nemesis then repairs it
#     (kill -9, restart) so the run goes on and the other verdicts still
#     come.  Every event is logged with its wall time (at_ms) and the
#     clients' monotonic clock (mono_ns, the histories' t);
#  3. the nemesis stops, the clients end by themselves (none hung), the
#     servers agree on one S-server topology and finish rebalancing
#     (dgctl state: ACTIVE, nothing moving); `dgctl idle-verify`: no
#     divergent partition in any cache; no PARTITION-LOST;
#  4. the checker (dglinz) on each register cache's merged histories:
#     linearizable; the bank clients saw no violation and bank-verify
#     passes (total, every acknowledged transfer there, no failed one);
#  5. persistence (the baseline was set to every server at the start):
#     kill -9 every server at once, restart all with their
#     data dirs, wait for the cluster; register-read-all on reg_persist
#     appends one read of every key to its history, and the checker runs
#     again (a read returning an older value than an acknowledged write is
#     non-linearizable); idle-verify of reg_persist.
# Knobs (environment):
#   DG_JEPSEN_SEED=N        the nemesis's and the clients' seed (printed at
#                           the start; timing still varies)
#   DG_JEPSEN_MINUTES=M     a soak of M minutes (as --minutes M); the budget
#                           grows to match; DG_JEPSEN_SECONDS=S: S seconds
#   DG_JEPSEN_SERVERS=N     as --servers N (3..9)
#   DG_JEPSEN_NEMESIS=kill|pause|both|none   which faults (default both)
#   DG_JEPSEN_BANK=0|1      the bank workload (default: 1 in a soak, 0 else)
#   DG_JEPSEN_THREADS=T, DG_JEPSEN_KEYS=K, DG_JEPSEN_PAUSE_US=US,
#   DG_JEPSEN_MIX=R:W:C     per register client (default 4, 10, 5000, 2:1:1)
#   DG_JEPSEN_PERSIST=0     no step 5
#   DG_JEPSEN_BACK_MS=MS    how long a paused server may take to be back in
#                           the cluster (default 20000)
#   DG_JEPSEN_CHECK_S=S     the checker's bound per cache (default 60)
#   DG_JEPSEN_BREAK=K       testing the test: client a of every register
#                           cache logs every K-th write ok without making
#                           it; the checker must find it (the test fails)
#   DG_KEEP_WORK=1          keep the work dir (histories, logs; lib.sh)
# shellcheck disable=SC2054,SC2317,SC2016  # cache specs have commas; functions run via wait_until; jq
set -euo pipefail

# ---- arguments: 3 or 4 paths, then options ----
ARGS=("$@")
LINZ=""
OPTS=()
if ((${#ARGS[@]} >= 4)) && [[ ${ARGS[3]} != --* ]]; then
	LINZ=${ARGS[3]}
	OPTS=("${ARGS[@]:4}")
elif ((${#ARGS[@]} > 3)); then
	OPTS=("${ARGS[@]:3}")
fi
SERVERS=${DG_JEPSEN_SERVERS:-3}
MINUTES=${DG_JEPSEN_MINUTES:-}
i=0
while ((i < ${#OPTS[@]})); do
	case ${OPTS[i]} in
	--servers) SERVERS=${OPTS[i + 1]:?--servers N}; i=$((i + 2)) ;;
	--minutes) MINUTES=${OPTS[i + 1]:?--minutes M}; i=$((i + 2)) ;;
	*) echo "usage: $0 DGNODE CACHECLIENT DGCTL DGLINZ [--servers N] [--minutes M]" >&2
	   exit 2 ;;
	esac
done
[[ $SERVERS =~ ^[3-9]$ ]] || { echo "--servers: 3..9, not $SERVERS" >&2; exit 2; }
if [[ -n $MINUTES ]]; then
	[[ $MINUTES =~ ^[1-9][0-9]*$ ]] || { echo "--minutes: a positive integer" >&2; exit 2; }
	RUN_S=$((MINUTES * 60))
	SOAK=1
else
	RUN_S=${DG_JEPSEN_SECONDS:-90}
	SOAK=0
fi
BANK_ON=${DG_JEPSEN_BANK:-$SOAK}
CHECK_S=${DG_JEPSEN_CHECK_S:-60}
# the script's own deadline: setup, the run, the clients' wind-down, the
# settling, the checker (4 runs), the restart of every server (240 s for
# the bounded run; ctest's TIMEOUT, 270 s, stays above it)
: "${DG_TEST_BUDGET_MS:=$(((RUN_S + 150) * 1000))}"
export DG_TEST_BUDGET_MS
set -- "${ARGS[@]:0:3}"
source "$(dirname "$0")/ctllib.sh"

[[ -n $LINZ ]] || die "no checker: pass dglinz's path as the 4th argument (the histories are not checked otherwise)"
[[ -x $LINZ ]] || die "the checker is not executable: $LINZ"
grep -q 'atomicity=atomic|transactional' <<<"$("$DGNODE" --help 2>/dev/null)" ||
	skip "this dgnode has no transactional caches"

FT=1000
NEMESIS=${DG_JEPSEN_NEMESIS:-both}
[[ $NEMESIS =~ ^(kill|pause|both|none)$ ]] || die "DG_JEPSEN_NEMESIS: kill, pause, both or none"
THREADS=${DG_JEPSEN_THREADS:-4}
KEYS=${DG_JEPSEN_KEYS:-10}
PAUSE_US=${DG_JEPSEN_PAUSE_US:-5000}
MIX=${DG_JEPSEN_MIX:-2:1:1}
SEED=${DG_JEPSEN_SEED:-$(((RANDOM << 15) | RANDOM))}
REG_CACHES=(reg_atomic reg_tx reg_persist)
REG_SIDES=(a b)
SETTLE_MS=${DG_JEPSEN_SETTLE_MS:-30000}
BACK_MS=${DG_JEPSEN_BACK_MS:-20000} # a paused server's time to be back
REQUEST_MS=5000 # the clients' op bound: an op hung past +5 s is STUCK
CACHE_ARGS=(
	--cache reg_atomic,mode=partitioned,backups=2,sync=full_sync,atomicity=atomic
	--cache reg_tx,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional
	--cache reg_persist,mode=partitioned,backups=2,sync=full_sync,atomicity=atomic,persistence=true
)
((BANK_ON == 0)) ||
	CACHE_ARGS+=(--cache bank,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional)
BREAK_ARGS=()
[[ -z ${DG_JEPSEN_BREAK:-} ]] || BREAK_ARGS=(--break-every "$DG_JEPSEN_BREAK")

# The nemesis's own generator (rng, cachelib.sh; bash's RANDOM also picks
# the ports), seeded with SEED.
RNG=$SEED
# MONO_OFF_MS: wall ms minus the clients' CLOCK_MONOTONIC ms (from the
# first register client's start line); 0 until known.
MONO_OFF_MS=0
stamp() {
	wall_ms
	STAMP="at_ms=$WALL"
	((MONO_OFF_MS == 0)) || STAMP+=" mono_ns=$(((WALL - MONO_OFF_MS) * 1000000))"
}
EVENTS=()   # the nemesis events, for the summary at the end
EV_MONO=()  # their mono_ns (0: before the clients started)
nemlog() {
	stamp
	log "nemesis: $* $STAMP"
	EVENTS+=("+$(((NOW - T0) / 1000))s $* $STAMP")
	EV_MONO+=($((MONO_OFF_MS == 0 ? 0 : (WALL - MONO_OFF_MS) * 1000000)))
}
FINDINGS=()
finding() {
	log "FINDING: $*"
	FINDINGS+=("$*")
	FAILED=1
}

declare -A DIR_OF=()
SRV=()       # the current server of each slot
CLIENTS=()   # every workload client (counted in the topology while alive)
EVENT=0
PAUSED=""

# A SIGSTOPped server gets SIGCONT before lib.sh's trap stops everything.
jepsen_cleanup() {
	local rc=$?
	set +e
	if [[ -n $PAUSED && -n ${PID[$PAUSED]:-} ]]; then
		kill -CONT "${PID[$PAUSED]}" 2>/dev/null || true
	fi
	(exit "$rc")
	cleanup
}
trap jepsen_cleanup EXIT

# start_server SLOT NAME: a dgnode on the slot's ports and data dir,
# seeded by every other slot's address (the addresses never change).
start_server() {
	local slot=$1 name=$2 i
	local -a seeds=()
	for ((i = 0; i < SERVERS; i++)); do
		((i == slot)) || seeds+=(--seed "tcp://127.0.0.1:${PORT_OF[s$i]}")
	done
	APORT[$name]=${APORT[s$slot]}
	HPORT[$name]=${HPORT[s$slot]}
	start_dgnode "$name" "${PORT_OF[s$slot]}" \
		--admin-listen "tcp://127.0.0.1:${APORT[s$slot]}" \
		--http-listen "http://127.0.0.1:${HPORT[s$slot]}" \
		--failure-detection-timeout "$FT" --data-dir "${DIR_OF[$slot]}" --storage-sync \
		"${CACHE_ARGS[@]}" "${seeds[@]}"
	SRV[slot]=$name
}

# settled NAME: NAME's dgctl state: S servers, ACTIVE (nothing moving, no
# partition lost), every node answered.
settled() {
	CTL_QUIET=1 CTL_LIMIT_S=5 ctl "$1" state --json
	((CRC == 0)) && jout --argjson s "$SERVERS" \
		'.servers == $s and .state == "ACTIVE" and .partitions_moving == 0 and .nodes_unanswered == 0' &&
		return 0
	sleep 0.2 # one dgctl run per 200 ms at most
	return 1
}

# soft_wait TIMEOUT_MS DESCRIPTION CMD...: wait_until, but a timeout
# returns 1 (logged) instead of ending the test; never past the budget
# minus the reserve the checker and the persistence step need.
RESERVE_MS=$((CHECK_S * 1000 + 20000))
soft_wait() {
	local timeout=$1 what=$2 start end
	shift 2
	now_ms
	start=$NOW
	end=$((start + timeout))
	((end <= T0 + TEST_BUDGET_MS - RESERVE_MS)) || end=$((T0 + TEST_BUDGET_MS - RESERVE_MS))
	while :; do
		if "$@"; then
			now_ms
			WAITED_MS=$((NOW - start))
			return 0
		fi
		now_ms
		if ((NOW >= end)); then
			log "timed out after $((NOW - start)) ms waiting for: $what"
			return 1
		fi
		sleep "$POLL_S"
	done
}

# node_story NAME: what NAME's log says about membership (for a FINDING):
# how many nodes it declared failed, its SEGMENTED and error lines, its
# last topology.
node_story() {
	local line nf
	nf=$(grep -c ' id=NODE-FAILED ' "$WORK/$1.err" 2>/dev/null) || true
	log "    $1 declared $nf node(s) failed (NODE-FAILED lines); its last membership lines:"
	grep -E ' id=(SEGMENTED|TOPOLOGY|NODE-REMOVED|NODE-REMOVED-SELF|REMOVED-TOLD|SELF-PAUSED|SELF-PAUSE-OVER|REJOIN-[A-Z]+|NODE-REJOINED|NODE-JOINED|JOIN[A-Z-]*) |level=error' \
		"$WORK/$1.err" 2>/dev/null | tail -n 4 | while IFS= read -r line; do
		log "    $1: $line"
	done || true
}

# rejoined NAME T_EVENT: waits for NAME (restarted) to be ready and the
# cluster to agree and settle; 1 when it did not.
rejoined() {
	local name=$1 t_ev=$2
	if ! soft_wait 20000 "$name NODE-READY" dg_ready_or_dead "$name" ||
		! has_log "$name" ' id=NODE-READY '; then
		finding "$name did not get ready after its restart"
		node_story "$name"
		return 1
	fi
	wait_admin_node "$name" 1000
	soft_wait 30000 "${SRV[*]} agree on one topology" servers_agree "${SRV[@]}" ||
		{ finding "the servers did not agree after $name's restart"; return 1; }
	soft_wait 30000 "rebalancing done (dgctl state on $name)" settled "$name" ||
		{ finding "rebalancing did not finish after $name's restart: ${OUT//$'\n'/ }"; return 1; }
	now_ms
	nemlog "#$EVENT: $name rejoined, rebalanced (version=$AGREED_V), $((NOW - t_ev)) ms after the event"
}

# restart_slot SLOT WHY: kill -9 the slot's server, wait until the others
# drop it, restart it on its address with its data dir.
restart_slot() {
	local slot=$1 why=$2 old=${SRV[$1]} new t_ev
	new=s$((slot + 1))e$EVENT$why
	others "$slot"
	now_ms
	t_ev=$NOW
	nemlog "#$EVENT: kill -9 $old (slot $((slot + 1)), id ${ID[$old]:-?})"
	kill9_node "$old"
	[[ $PAUSED != "$old" ]] || PAUSED=""
	soft_wait 15000 "${OTHERS[*]} drop $old" servers_agree "${OTHERS[@]}" ||
		finding "${OTHERS[*]} did not drop the killed $old within 15 s"
	start_server "$slot" "$new"
	rejoined "$new" "$t_ev"
}

# pause_slot SLOT MS: SIGSTOP the slot's server for MS, SIGCONT, wait for
# it to be back.  Not back: a finding; the server is restarted (repair).
pause_slot() {
	local slot=$1 ms=$2 name=${SRV[$1]} t_ev
	now_ms
	t_ev=$NOW
	nemlog "#$EVENT: SIGSTOP $name (slot $((slot + 1)), id ${ID[$name]}) for $ms ms"
	kill -STOP "${PID[$name]}"
	PAUSED=$name
	sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
	kill -CONT "${PID[$name]}"
	PAUSED=""
	nemlog "#$EVENT: SIGCONT $name"
	if soft_wait "$BACK_MS" "$name back in the cluster after its pause (${SRV[*]} agree)" \
		servers_agree "${SRV[@]}" &&
		soft_wait 30000 "rebalancing done (dgctl state on $name)" settled "$name"; then
		now_ms
		nemlog "#$EVENT: $name back (version=$AGREED_V), $((NOW - t_ev)) ms after the SIGSTOP"
		return 0
	fi
	finding "$name (slot $((slot + 1))) did not come back into the cluster within $((BACK_MS / 1000)) s of" \
		"SIGCONT after a $ms ms pause (SIGSTOP at +$(((t_ev - T0) / 1000)) s); its last" \
		"membership lines and the others' views:"
	local n
	for n in "${SRV[@]}"; do
		dg_topo "$n"
		log "    $n: last TOPOLOGY version=$TV nodes=$TC$( [[ $n != "$name" ]] || echo ' (the paused one)')"
	done
	node_story "$name"
	nemlog "#$EVENT: repair: restart $name"
	restart_slot "$slot" r
}

# finished NAME: logs the client's output (but PROGRESS) and exit status.
finished() {
	local name=$1 line
	CLIENT_RC=${RC[$name]}
	while IFS= read -r line; do
		[[ $line == PROGRESS* ]] || log "  $name: $line"
	done <"$WORK/$name.out"
	log "$name exited $CLIENT_RC"
}

# warn_digest: the servers' warn and error lines, counted by id.
warn_digest() {
	local n ids
	for n in "${NODES[@]}"; do
		[[ $n == n[0-9]* || $n == s[0-9]* ]] || continue
		ids=$(grep -oE 'level=(warn|error) id=[A-Z0-9-]+' "$WORK/$n.err" 2>/dev/null |
			sed 's/level=//; s/ id=/:/' | sort | uniq -c | awk '{printf "%s%s=%s", s, $2, $1; s=" "}') || true
		log "  $n warn/error: ${ids:-none}"
	done
}

# linz CACHE STEP: the checker on CACHE's histories; its output logged.
linz() {
	local cache=$1 step=$2 rc=0 t0 line
	local -a files=("$WORK"/hist."$cache".*)
	now_ms
	t0=$NOW
	timeout -k 2 "$CHECK_S" "$LINZ" "${files[@]}" >"$WORK/linz.$cache.$step.out" 2>&1 || rc=$?
	now_ms
	log "dglinz $cache ($step, ${#files[@]} histories, $(cat "${files[@]}" | wc -l) events):" \
		"exit $rc after $((NOW - t0)) ms"
	# the first anomaly in full, then every key's verdict line and the
	# summary (all of it: $WORK/linz.<cache>.<step>.out)
	awk '/^key /{k++} k<=1 && n<50 {print; n++; next} /^(key |dglinz:)/' \
		"$WORK/linz.$cache.$step.out" | while IFS= read -r line; do
		log "  dglinz: $line"
	done
	# dglinz's times are relative to the histories' first event: the
	# nemesis events on that clock
	local base j rel
	base=$(head -q -n 1 "${files[@]}" | cut -d' ' -f1 | sort -n | head -n 1)
	if ((rc != 0)) && [[ $base =~ ^[0-9]+$ ]]; then
		log "  the nemesis on dglinz's clock (+0 = mono_ns $base):"
		for ((j = 0; j < ${#EVENTS[@]}; j++)); do
			((EV_MONO[j] != 0)) || continue
			rel=$((EV_MONO[j] - base))
			log "    $(printf '%s%d.%03ds' "$( ((rel < 0)) && echo -)" $(((rel < 0 ? -rel : rel) / 1000000000)) $((((rel < 0 ? -rel : rel) / 1000000) % 1000))) ${EVENTS[j]#* }"
		done
	fi
	case $rc in
	0) log "ok: $cache ($step): linearizable" ;;
	1) finding "$cache ($step): NOT linearizable (dglinz above)" ;;
	3) finding "$cache ($step): the checker could not decide (exit 3)" ;;
	124 | 137) finding "$cache ($step): the checker ran out of its ${CHECK_S} s" ;;
	*) finding "$cache ($step): the checker failed (exit $rc)" ;;
	esac
}

# lost_acks CACHE: after the restart of every server, the final read of
# each key (hist.CACHE.final) must not be older than an acknowledged
# write: a value v is lost-over when some ok write or cas=true was invoked
# after v's write completed.  A diagnostic beside dglinz (whose verdict
# per key stops at its first anomaly, maybe one from the run): it names
# the acknowledged writes the restart lost.
lost_acks() {
	local cache=$1 out
	out=$(awk '
		FILENAME ~ /\.final$/ { if ($3 == "ok") final[$4] = $6; next }
		$3 == "invoke" { inv[$2] = $1; next }
		$3 == "ok" && ($5 == "write" || ($5 == "cas" && $8 == "true")) {
			v = ($5 == "write") ? $6 : $7
			ret[$4, v] = $1; n[$4]++; I[$4, n[$4]] = inv[$2]; V[$4, n[$4]] = v; R[$4, n[$4]] = $1
			next
		}
		$3 == "info" && ($5 == "write" || $5 == "cas") {
			v = ($5 == "write") ? $6 : $7; unknown[$4, v] = 1
		}
		END {
			for (k in final) {
				v = final[k]
				if (unknown[k, v]) continue
				r = ((k, v) in ret) ? ret[k, v] : 0
				c = 0; last = ""
				for (i = 1; i <= n[k]; i++)
					if (I[k, i] > r) { c++; if (last == "" || R[k, i] > lr) { last = V[k, i]; lr = R[k, i] } }
				if (c > 0)
					printf "%s: read %s after the restart; %d acknowledged writes began after %s, the last %s\n", k, v, c, (r ? "its write completed" : "the start"), last
			}
		}' "$WORK"/hist."$cache".*) || true
	if [[ -z $out ]]; then
		log "ok: $cache: no acknowledged write lost by the restart (each final read is a value no acknowledged write overwrote)"
		return 0
	fi
	finding "$cache: acknowledged writes lost by the restart of every server:"
	while IFS= read -r line; do log "    $line"; done <<<"$out"
}

# idle_verify NODE [CACHE...]: no divergent partition.  A node that did
# not answer (a client node that just left, not yet removed) is asked
# again, for 10 s at most; a divergence is never retried.
idle_verify() {
	local node=$1 until_ms
	shift
	now_ms
	until_ms=$((NOW + 10000))
	while :; do
		CTL_LIMIT_S=60 ctl "$node" idle-verify "$@" --json
		jout '.divergent_count == 0 and .nodes_unanswered > 0' || break
		now_ms
		((NOW < until_ms)) || break
		log "idle-verify: $(jq -r .nodes_unanswered <<<"$OUT") nodes did not answer: again"
		sleep 0.5
	done
	if ((CRC == 0)) && jout '.divergent_count == 0 and .nodes_unanswered == 0'; then
		log "ok: idle-verify ${*:-(all caches)}: $(jq -c '{partitions_checked, partitions_skipped, divergent_count}' <<<"$OUT")"
		return 0
	fi
	finding "idle-verify ${*:-(all caches)}: exit $CRC: $(jq -c '{partitions_checked, partitions_skipped, divergent_count, nodes_unanswered}' <<<"$OUT" 2>/dev/null)"
	jq -r '.divergent[:10][] | "\(.cache) partition \(.partition): " + ([.copies[] | "\(.node) \(.role) \(.state) entries=\(.entries) digest=\(.digest)"] | join("; "))' \
		<<<"$OUT" 2>/dev/null | while IFS= read -r line; do log "    $line"; done || true
	return 1
}

log "seed $SEED (DG_JEPSEN_SEED=$SEED repeats the nemesis and the ops), $SERVERS servers," \
	"run ${RUN_S} s, nemesis=$NEMESIS, bank=$BANK_ON, register clients: $THREADS threads," \
	"$KEYS keys, mix $MIX, pause ${PAUSE_US} us${DG_JEPSEN_BREAK:+, BREAK every $DG_JEPSEN_BREAK writes}"
for ((i = 0; i < SERVERS; i++)); do
	free_port
	PORT_OF[s$i]=$PORT
	free_port
	APORT[s$i]=$PORT
	free_port
	HPORT[s$i]=$PORT
	DIR_OF[$i]=$(mktemp -d "$WORK/data-s$((i + 1)).XXXXXX")
done
# slot 0 first (it forms the cluster), then the others through it
start_server 0 n1
wait_admin_node n1
for ((i = 1; i < SERVERS; i++)); do
	start_server "$i" "n$((i + 1))"
done
for ((i = 1; i < SERVERS; i++)); do
	wait_admin_node "n$((i + 1))"
done
wait_until 15000 "${SRV[*]} agree on $SERVERS nodes" agree_nodes "$SERVERS" "${SRV[@]}"
log "cluster up: version=$AGREED_V"
SEEDS=()
for ((i = 0; i < SERVERS; i++)); do
	SEEDS+=(--seed "tcp://127.0.0.1:${PORT_OF[s$i]}")
done
COMMON=(--failure-detection-timeout "$FT" --request-timeout "$REQUEST_MS")
if [[ ${DG_JEPSEN_PERSIST:-1} == 1 ]]; then
	# step 5 restarts every server: with the baseline persisted the
	# cluster activates with a majority of it, and the copies each server
	# loaded are merged (newest version wins) before they serve
	BL=()
	for ((i = 0; i < SERVERS; i++)); do
		BL+=("tcp://127.0.0.1:${PORT_OF[s$i]}")
	done
	ctl "${SRV[0]}" baseline set "${BL[@]}"
	expect_rc 0 "baseline set (every server)"
fi

if ((BANK_ON)); then
	log "bank-init"
	client bank_init 40000 "${SEEDS[@]}" --cache bank "${COMMON[@]}" --duration 30 bank-init
	[[ $CLIENT_RC == 0 ]] || die "bank-init failed"
	wait_until 10000 "the init client left" servers_agree "${SRV[@]}"
fi

log "1. the workload: ${#REG_CACHES[@]} caches x ${#REG_SIDES[@]} register clients," \
	"${RUN_S} s$( ((BANK_ON)) && echo ', and 2 bank clients')"
k=0
for cache in "${REG_CACHES[@]}"; do
	for side in "${REG_SIDES[@]}"; do
		k=$((k + 1))
		name=${cache#reg_}_$side
		extra=()
		[[ $side != a ]] || extra=("${BREAK_ARGS[@]}")
		start_proc "$name" "$CACHECLIENT" "${SEEDS[@]}" --cache "$cache" "${COMMON[@]}" \
			register-run --duration "$RUN_S" --client-id "$name" --threads "$THREADS" \
			--keys "$KEYS" --mix "$MIX" --pause-us "$PAUSE_US" \
			--rand-seed $((SEED * 16 + k)) --history "$WORK/hist.$cache.$side" "${extra[@]}"
		CLIENTS+=("$name")
	done
done
if ((BANK_ON)); then
	for m in pess-rr opt-ser; do
		k=$((k + 1))
		name=bank_${m%%-*}
		extra=()
		[[ $m != pess-rr ]] || extra=(--ordered)
		start_proc "$name" "$CACHECLIENT" "${SEEDS[@]}" --cache bank "${COMMON[@]}" \
			--timeout-ms 2000 bank-run --duration "$RUN_S" --threads 3 --stall-ms 20000 \
			--mode "$m" --client-id "${m%%-*}" --rand-seed $((SEED * 16 + k)) \
			--ok-log "$WORK/$name.ok" --fail-log "$WORK/$name.fail" "${extra[@]}"
		CLIENTS+=("$name")
	done
fi
wait_until 30000 "every client starts its workload" clients_started
now_ms
RUN_END=$((NOW + RUN_S * 1000))
line=$(grep -m1 '^register-run client=' "$WORK/${CLIENTS[0]}.out")
[[ $line =~ mono_ns=([0-9]+)\ at_ms=([0-9]+) ]] &&
	MONO_OFF_MS=$((BASH_REMATCH[2] - BASH_REMATCH[1] / 1000000))
log "every client running; the workload ends at +$(((RUN_END - T0) / 1000)) s;" \
	"mono_ns = (at_ms - $MONO_OFF_MS) * 1e6"
wait_until 15000 "${SRV[*]} see every client" servers_agree "${SRV[@]}"

log "2. the nemesis ($NEMESIS)"
clients_alive() {
	local c
	for c in "${CLIENTS[@]}"; do
		if alive "$c"; then return 0; fi
	done
	return 1
}
past() { now_ms; ((NOW >= $1)) || ! clients_alive; }
KILLS=0 PAUSES=0
if [[ $NEMESIS != none ]]; then
	# the last event starts 15 s before the end: time to rejoin and settle
	EV_END=$((RUN_END - 15000))
	now_ms
	rng 3001
	next=$((NOW + 5000 + R))
	while ((next < EV_END)); do
		now_ms
		wait_until $((next - NOW + 1000)) "the next event's time" past "$next"
		clients_alive || break
		EVENT=$((EVENT + 1))
		rng "$SERVERS"
		slot=$R
		kind=$NEMESIS
		if [[ $kind == both ]]; then
			rng 2
			kind=$( ((R == 0)) && echo kill || echo pause)
		fi
		now_ms
		t=$NOW
		if [[ $kind == kill ]]; then
			KILLS=$((KILLS + 1))
			restart_slot "$slot" "" || true
		else
			PAUSES=$((PAUSES + 1))
			rng 2501
			pause_slot "$slot" $((1500 + R)) || true
		fi
		rng 3001
		next=$((t + 5000 + R))
		now_ms
		((next > NOW)) || next=$NOW
	done
fi
log "nemesis over: $KILLS kills, $PAUSES pauses"

log "3. the clients end; the cluster settles"
now_ms
# each client bounds its own wind-down (an op or tx hung 20 s past the
# end: it prints HUNG and exits 1); one that does not exit is killed
soft_wait $((RUN_END - NOW + REQUEST_MS + 30000)) "every client exits" eval '! clients_alive' ||
	true
for c in "${CLIENTS[@]}"; do
	if alive "$c"; then
		finding "$c did not exit within 35 s of the end: kill -9 (its last lines below)"
		kill -KILL "${PID[$c]}" 2>/dev/null || true
		tail -n 5 "$WORK/$c.err" | while IFS= read -r line; do log "    $c: $line"; done
	fi

	reap "$c"
	finished "$c"
	if [[ $c == bank_* ]]; then
		check "$c: bank-run saw no violation and ended by itself" test "$CLIENT_RC" = 0
		check "$c: transfers committed throughout (no 20 s without one)" \
			grep -q ' stalls=0 ' "$WORK/$c.out"
	else
		check "$c: register-run ended by itself, history written (no op hung)" \
			test "$CLIENT_RC" = 0
	fi
done
CLIENTS=()
warn_digest
SETTLED=0
if soft_wait "$SETTLE_MS" "${SRV[*]} agree on $SERVERS servers" servers_agree "${SRV[@]}" &&
	soft_wait 30000 "rebalancing done (dgctl state on ${SRV[0]})" settled "${SRV[0]}"; then
	SETTLED=1
	log "settled: version=$AGREED_V, state ACTIVE"
	idle_verify "${SRV[0]}" || true
else
	finding "the cluster did not settle on $SERVERS servers after the run"
	for n in "${SRV[@]}"; do
		dg_topo "$n"
		log "    $n: last TOPOLOGY version=$TV nodes=$TC"
	done
fi
for n in "${NODES[@]}"; do
	[[ $n == n[0-9]* || $n == s[0-9]* ]] || continue
	check "$n logged no PARTITION-LOST" lacks_log "$n" ' id=PARTITION-LOST '
done

log "4. verdicts"
for cache in "${REG_CACHES[@]}"; do
	linz "$cache" run
done
if ((BANK_ON)); then
	if ((SETTLED)); then
		logs=()
		for m in pess opt; do
			logs+=(--ok-log "$WORK/bank_$m.ok" --fail-log "$WORK/bank_$m.fail")
		done
		client bank_verify 60000 "${SEEDS[@]}" --cache bank "${COMMON[@]}" --duration 30 \
			bank-verify "${logs[@]}"
		check "bank-verify: total, every acknowledged transfer there, no failed one, the ledger adds up" \
			test "$CLIENT_RC" = 0
	else
		finding "bank-verify skipped: the cluster did not settle"
	fi
fi

if [[ ${DG_JEPSEN_PERSIST:-1} == 1 ]]; then
	log "5. persistence: kill -9 every server, restart all on their data dirs"
	EVENT=$((EVENT + 1))
	for ((i = 0; i < SERVERS; i++)); do
		[[ -z ${PID[${SRV[i]}]:-} ]] || kill -KILL "${PID[${SRV[i]}]}" 2>/dev/null || true
	done
	for ((i = 0; i < SERVERS; i++)); do
		reap "${SRV[i]}"
	done
	nemlog "#$EVENT: kill -9 every server (${SRV[*]})"
	start_server 0 "s1e${EVENT}all"
	wait_admin_node "${SRV[0]}" 30000
	for ((i = 1; i < SERVERS; i++)); do
		start_server "$i" "s$((i + 1))e${EVENT}all"
	done
	for ((i = 1; i < SERVERS; i++)); do
		wait_admin_node "${SRV[i]}" 30000
	done
	wait_until 20000 "${SRV[*]} agree on $SERVERS nodes" agree_nodes "$SERVERS" "${SRV[@]}"
	wait_until 30000 "rebalancing done (dgctl state on ${SRV[0]})" settled "${SRV[0]}"
	nemlog "#$EVENT: every server back (version=$AGREED_V)"
	for n in "${SRV[@]}"; do
		line=$(grep -m1 ' id=CACHE-LOADED cache="reg_persist" ' "$WORK/$n.err" || true)
		log "  $n: ${line:-no CACHE-LOADED line for reg_persist}"
	done
	client read_all 60000 "${SEEDS[@]}" --cache reg_persist "${COMMON[@]}" --duration 30 \
		register-read-all --keys "$KEYS" --client-id final --history "$WORK/hist.reg_persist.final"
	check "register-read-all: every key of reg_persist read" test "$CLIENT_RC" = 0
	linz reg_persist restart
	lost_acks reg_persist
	idle_verify "${SRV[0]}" reg_persist || true
fi

log "nemesis events (at_ms: wall ms; mono_ns: the histories' clock):"
for e in "${EVENTS[@]}"; do
	log "  $e"
done
if ((${#FINDINGS[@]})); then
	log "findings:"
	for f in "${FINDINGS[@]}"; do
		log "  - $f"
	done
fi
warn_digest
stop_all_checked
finish
