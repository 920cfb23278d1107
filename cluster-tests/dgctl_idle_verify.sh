#!/usr/bin/env bash
# dgctl_idle_verify: `dgctl idle-verify` finds exactly the divergence a test
# hook makes, and none after a real transactional workload.
#  1. 3 dgnodes with DG_ADMIN_TEST_HOOKS=1, cache bank (PARTITIONED,
#     TRANSACTIONAL, backups=2, FULL_SYNC: every node holds every partition);
#  2. the bank workload: bank-init, bank-run (pess-rr, ~10 s), bank-verify;
#  3. idle-verify: exit 0, divergent_count 0, partitions_checked 1024 (the
#     table says "no divergence");
#  4. `dgctl debug put-local bank acct3 999999` on node B overwrites B's copy
#     only; idle-verify exits 1 and lists exactly one divergent partition,
#     whose three copies include B's with a digest different from the two
#     others (which agree); the table lists it; naming the cache gives the
#     same; `idle-verify nosuchcache` exits 1.
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

FT=1000
BANK=bank
RUN_S=${DG_IDLE_RUN_S:-10}
export DG_ADMIN_TEST_HOOKS=1
NODE_ARGS=(--failure-detection-timeout "$FT"
	--cache "$BANK,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional")
CLIENT_ARGS=(--cache "$BANK" --failure-detection-timeout "$FT")

log "1. three servers with test hooks"
start_three "${NODE_ARGS[@]}"

log "2. the bank workload"
seeds_of n1 n2 n3
client init 40000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" --duration 30 bank-init
[[ $CLIENT_RC == 0 ]] || die "bank-init failed: nothing to test"
client run $(((RUN_S + 30) * 1000)) "${SEEDS[@]}" "${CLIENT_ARGS[@]}" bank-run \
	--duration "$RUN_S" --mode pess-rr --ordered --client-id p --threads 3 \
	--ok-log "$WORK/p.ok" --fail-log "$WORK/p.fail"
check "bank-run: no violation (exit $CLIENT_RC)" test "$CLIENT_RC" = 0
client verify 40000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" --duration 30 bank-verify \
	--ok-log "$WORK/p.ok" --fail-log "$WORK/p.fail"
check "bank-verify: passed (exit $CLIENT_RC)" test "$CLIENT_RC" = 0
wait_until 10000 "the clients left: 3 nodes" agree_nodes 3 n1 n2 n3

log "3. idle-verify after the workload"
ctl n1 idle-verify --json
check "idle-verify: exit 0 (got $CRC)" test "$CRC" = 0
check "idle-verify --json: divergent_count 0, partitions_checked 1024, none skipped, every node answered" \
	jout '.divergent_count == 0 and .partitions_checked == 1024 and .partitions_skipped == 0 and .nodes_unanswered == 0 and .caches == ["bank"] and .divergent == []'
ctl n2 idle-verify
check "idle-verify table: exit 0, no divergence" \
	eval 'test "$CRC" = 0 && out_has "^idle-verify: 1024 partitions checked in 1 caches" && out_has "^no divergence"'

log "4. corrupt node B's copy of acct3"
B=n2
ctl n1 cache get "$BANK" acct3
BEFORE=$OUT
ctl "$B" debug put-local "$BANK" acct3 999999
check "debug put-local on $B: exit 0" test "$CRC" = 0
check "$B logged ADMIN-TEST-CORRUPT" has_log "$B" ' id=ADMIN-TEST-CORRUPT '
ctl n3 idle-verify --json
check "idle-verify after the corruption: exit 1 (got $CRC)" test "$CRC" = 1
check "idle-verify: stderr says partitions diverge" err_has '1 partitions diverge'
check "idle-verify --json: exactly one divergent partition of bank, 1024 checked" \
	jout '.divergent_count == 1 and (.divergent | length) == 1 and .divergent[0].cache == "bank" and .partitions_checked == 1024'
check "idle-verify --json: its 3 copies are on n1, n2, n3, all OWNING, one primary" \
	jout --arg a "${ID[n1]}" --arg b "${ID[n2]}" --arg c "${ID[n3]}" \
	'.divergent[0].copies | ([.[].node] | sort) == ([$a, $b, $c] | sort) and all(.[]; .state == "OWNING") and ([.[] | select(.role == "primary")] | length) == 1'
check "idle-verify --json: $B's digest differs from the two others, which agree" \
	jout --arg b "${ID[$B]}" \
	'.divergent[0].copies | ([.[] | select(.node != $b) | .digest] | unique | length) == 1 and ([.[] | select(.node == $b) | .digest][0]) as $d | all(.[] | select(.node != $b); .digest != $d)'
PART=$(jq -r '.divergent[0].partition' <<<"$OUT")
ctl n1 idle-verify
check "idle-verify table: exit 1, 1 partition listed with 3 rows" \
	eval 'test "$CRC" = 1 && out_has "^1 partitions diverge:" && out_has "^CACHE +PARTITION +NODE +ADDRESS +ROLE +ENTRIES +DIGEST +BYTES$" && test "$(grep -c -E "^bank +$PART +[0-9a-f]{16} " <<<"$OUT")" = 3'
ctl n1 idle-verify "$BANK" --json
check "idle-verify bank: exit 1, the same partition $PART" \
	eval 'test "$CRC" = 1 && jout --argjson p "$PART" ".divergent_count == 1 and .divergent[0].partition == \$p"'
ctl n1 idle-verify nosuchcache
check "idle-verify nosuchcache: exit 1, names it" eval 'test "$CRC" = 1 && err_has nosuchcache'
# a put through the cache API repairs every copy: no divergence again
ctl n1 cache put "$BANK" acct3 "$BEFORE"
ctl n1 idle-verify --json
check "after a real put of acct3: idle-verify exit 0, no divergence" \
	eval 'test "$CRC" = 0 && jout ".divergent_count == 0"'

stop_all_checked
finish
