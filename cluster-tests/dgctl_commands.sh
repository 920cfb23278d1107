#!/usr/bin/env bash
# dgctl_commands: every dgctl command against 3 (then 4) real dgnodes with a
# cluster secret and a TRANSACTIONAL cache "bank" (backups=2, FULL_SYNC),
# checking both the human tables and the --json values (jq):
#  1. usage errors exit 2 at once (no connection): unknown command, unknown
#     option, missing value or argument, an option of another command, a
#     bad --timeout; --help exits 0;
#  2. state: ACTIVE, 3 servers, the topology version the nodes logged;
#     nodes: 3 rows with distinct ids (those of NODE-READY), one
#     coordinator, uptime > 0, admin and http URLs as NODE-READY printed;
#  3. cache create with every setting, list shows them (through another
#     node too); put/get/remove/scan round trips; a missing key exits 1
#     naming the key; destroy removes the cache;
#  4. metrics: message types with traffic, and the cache's puts = the puts
#     this test made through that node;
#  5. tx list / tx kill: a cacheclient tx-hold holds a PESSIMISTIC tx:
#     listed (near row with its label, primary row), killed (exit 0, the
#     holder's commit fails DG_ERR_TX_ROLLED_BACK), a second kill exits 1;
#  6. idle-verify on the healthy cluster: exit 0, no divergence; debug
#     put-local without DG_ADMIN_TEST_HOOKS exits 1;
#  7. rebalance status: complete; a 4th node joins: --watch ends with exit 0
#     and complete=true at the 4-node topology;
#  8. wrong secret: exit 1 "authentication failed"; shutdown of one node:
#     it exits 0, nodes shows 3; kill -9 another: its admin port exits 1
#     "cannot connect" within ~3 s; a cache with backups 0 lost its
#     partitions: state LOST_PARTITIONS, gets of its keys there fail
#     PARTITION_LOST; cache reset-lost: none lost, the other keys kept; a
#     port that accepts but never answers (a node's cluster port) exits 1
#     within the timeout;
#  9. shutdown --cluster: every remaining dgnode exits 0.
# TODO(baseline): `dgctl baseline [show|set|add|remove]` is not available
# yet; test it here once it is.
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

FT=1000
BANK=bank
NFILL=${DG_CTL_FILL:-20000}
# the nodes and dgctl read the secret from the environment (dgctl too)
export DG_CLUSTER_SECRET=dgctl-test-secret-$RANDOM$RANDOM
unset DG_ADMIN_TEST_HOOKS
NODE_ARGS=(--failure-detection-timeout "$FT" --rebalance-batch 4k
	--cache "$BANK,mode=partitioned,backups=2,sync=full_sync,atomicity=transactional")

log "0. three servers"
start_three "${NODE_ARGS[@]}"
log "cluster up: version=$AGREED_V"
for n in n1 n2 n3; do
	check "$n: NODE-READY admin=${READY_ADMIN[$n]} is the --admin-listen given" \
		test "${READY_ADMIN[$n]}" = "tcp://127.0.0.1:${APORT[$n]}"
	check "$n: NODE-READY http=${READY_HTTP[$n]} is the --http-listen given" \
		test "${READY_HTTP[$n]}" = "http://127.0.0.1:${HPORT[$n]}"
done

log "1. usage errors: exit 2, without connecting"
# a port nothing listens on: a usage error must not even try it
free_port
DEAD_PORT=$PORT
usage_case() {
	local what=$1
	shift
	ctl_port "$DEAD_PORT" "$@"
	check "usage: $what: exit 2 (got $CRC)" test "$CRC" = 2
	check "usage: $what: says why on stderr" test -n "$ERR"
	check "usage: $what: nothing on stdout" test -z "$OUT"
}
usage_case "unknown command" frobnicate
usage_case "unknown option" state --frobnicate
usage_case "no command" --json
usage_case "missing option value" state --timeout
usage_case "missing argument of cache get" cache get kv
usage_case "extra argument of state" state extra
usage_case "unknown cache subcommand" cache frob kv
usage_case "an option of another command" state --limit 3
usage_case "an option of another command (tx kill)" tx kill 0000000000000001:1 --min-age 1s
usage_case "bad --timeout" --timeout soon state
usage_case "--timeout 0" --timeout 0 state
usage_case "bad --backups" cache create x --backups many
usage_case "rebalance without status" rebalance
ctl_raw --help
check "--help: exit 0 and lists the commands" eval \
	'test "$CRC" = 0 && out_has "^Commands:" && out_has "idle-verify" && out_has "rebalance status"'
ctl_raw tx --help
check "tx --help: exit 0, the tx synopsis" eval 'test "$CRC" = 0 && out_has "dgctl tx kill ID"'

log "2. state and nodes"
# (start_three waited for ACTIVE: right after the joins, partitions are
# still moving and the state says REBALANCING)
ctl n2 state
expect_rc 0 "state"
check "state table: state ACTIVE" out_has '^state: +ACTIVE$'
check "state table: 3 server nodes" out_has '^server nodes: +3$'
ctl n2 state --json
expect_rc 0 "state --json"
check "state --json: state ACTIVE, servers 3, clients 0" \
	jout '.state == "ACTIVE" and .servers == 3 and .clients == 0'
check "state --json: topology_version $AGREED_V (the nodes' TOPOLOGY)" \
	jout --argjson v "$AGREED_V" '.topology_version == $v'
check "state --json: the coordinator is n1 (${ID[n1]})" \
	jout --arg id "${ID[n1]}" '.coordinator == $id'

ctl n3 nodes
expect_rc 0 "nodes"
check "nodes table: header row" out_has '^ORDER +ID +ADDRESS +ROLE +UPTIME +ADMIN +HTTP$'
rows=$(grep -c -E '^ +[0-9]+ +[0-9a-f]{16} ' <<<"$OUT" || true)
check "nodes table: 3 rows (got $rows)" test "$rows" = 3
check "nodes table: one coordinator row" test "$(grep -c ',coordinator' <<<"$OUT")" = 1
check "nodes table: the connected node is marked (this)" \
	out_has "${ID[n3]} .*\(this\)"
for n in n1 n2 n3; do
	check "nodes table: $n's row has its admin and http URLs" \
		out_has "${ID[$n]} +${URL[$n]} .* ${READY_ADMIN[$n]} +${READY_HTTP[$n]}$"
done
ctl n3 nodes --json
expect_rc 0 "nodes --json"
check "nodes --json: 3 entries with distinct ids" \
	jout '(.nodes | length) == 3 and ([.nodes[].id] | unique | length) == 3'
check "nodes --json: exactly one coordinator, n1" \
	jout --arg id "${ID[n1]}" '[.nodes[] | select(.coordinator)] | length == 1 and .[0].id == $id'
check "nodes --json: every uptime_ms > 0, every role server" \
	jout 'all(.nodes[]; (.uptime_ms | type) == "number" and .uptime_ms > 0 and .role == "server")'
check "nodes --json: self is n3" jout --arg id "${ID[n3]}" '.self == $id'
for n in n1 n2 n3; do
	check "nodes --json: $n (${ID[$n]}): address, admin and http as NODE-READY printed" \
		jout --arg id "${ID[$n]}" --arg a "${URL[$n]}" --arg ad "${READY_ADMIN[$n]}" \
		--arg h "${READY_HTTP[$n]}" \
		'[.nodes[] | select(.id == $id)] | length == 1 and .[0].address == $a and .[0].admin == $ad and .[0].http == $h'
done

log "3. caches: create, list, put/get/remove/scan, destroy"
KV=kvtest
ctl n1 cache create "$KV" --mode partitioned --backups 1 --sync primary_sync \
	--atomicity atomic --ttl 90m
expect_rc 0 "cache create $KV with every setting"
check "cache create: says so" out_has "^created cache $KV$"
ctl n1 cache create "$KV" --backups 2
expect_rc 1 "cache create $KV again with another configuration"
check "cache create again: the error says it exists" err_has 'exists'
ctl n1 cache create bad --mode sideways
expect_rc 1 "cache create with a bad --mode"
ctl n2 cache create "${KV}r" --mode replicated --sync full_async --atomicity transactional
expect_rc 0 "cache create ${KV}r (replicated, full_async, transactional)"
# every node learns of the caches: poll the list of the one that did not create them
list_has_both() { ctl n3 cache list --json >/dev/null && jout --arg k "$KV" '[.caches[].name] | index($k) != null and index($k + "r") != null'; }
wait_until 10000 "n3's cache list has $KV and ${KV}r" list_has_both
check "cache list --json (n3): $KV: partitioned, 1 backup, primary_sync, atomic, ttl 90m, 1024 partitions, no persistence, size 0" \
	jout --arg k "$KV" '.caches[] | select(.name == $k) | .mode == "partitioned" and .backups == 1 and .sync == "primary_sync" and .atomicity == "atomic" and .ttl_ms == 5400000 and .partitions == 1024 and .persistence == false and .size == 0'
check "cache list --json (n3): ${KV}r: replicated, full_async, transactional, no ttl" \
	jout --arg k "${KV}r" '.caches[] | select(.name == $k) | .mode == "replicated" and .sync == "full_async" and .atomicity == "transactional" and .ttl_ms == 0'
check "cache list --json (n3): $BANK: 2 backups, full_sync, transactional" \
	jout --arg k "$BANK" '.caches[] | select(.name == $k) | .mode == "partitioned" and .backups == 2 and .sync == "full_sync" and .atomicity == "transactional"'
ctl n1 cache list
expect_rc 0 "cache list"
check "cache list table: header row" \
	out_has '^NAME +MODE +BACKUPS +SYNC +ATOMICITY +PARTITIONS +PERSISTENCE +TTL +SIZE$'
check "cache list table: the $KV row" \
	out_has "^$KV +partitioned +1 +primary_sync +atomic +1024 +no +1h30m +0$"
check "cache list table: the $BANK row" \
	out_has "^$BANK +partitioned +2 +full_sync +transactional +1024 +no +- +0$"
check "cache list table: 3 caches" test "$(($(wc -l <<<"$OUT") - 1))" = 3

NPUT=7
for ((i = 0; i < NPUT; i++)); do
	ctl n1 cache put "$KV" "key$i" "value-$i with spaces"
	[[ $CRC == 0 && $OUT == ok ]] || check "cache put $KV key$i: exit 0, ok" false
done
log "put $NPUT keys through n1"
ctl n2 cache get "$KV" key3
check "cache get key3 through n2: exit 0, the value" \
	eval 'test "$CRC" = 0 && test "$OUT" = "value-3 with spaces"'
ctl n3 cache get "$KV" key6 --json
check "cache get --json key6 through n3: the value" \
	eval 'test "$CRC" = 0 && jout ".value == \"value-6 with spaces\""'
ctl n2 cache get "$KV" no-such-key
expect_rc 1 "cache get of a missing key"
check "cache get of a missing key: stderr names the key" err_has 'no-such-key'
check "cache get of a missing key: nothing on stdout" test -z "$OUT"
ctl n3 cache remove "$KV" key6
check "cache remove key6: exit 0, removed" eval 'test "$CRC" = 0 && test "$OUT" = removed'
ctl n3 cache remove "$KV" key6 --json
check "cache remove key6 again: exit 0, removed=false" \
	eval 'test "$CRC" = 0 && jout ".removed == false"'
ctl n1 cache get "$KV" key6
expect_rc 1 "cache get of the removed key6"
ctl n1 cache put "$KV" key0 overwritten
ctl n2 cache get "$KV" key0
check "cache get key0 after an overwrite: the new value" eval 'test "$CRC" = 0 && test "$OUT" = overwritten'
NPUT=$((NPUT + 1))
ctl n2 cache scan "$KV"
expect_rc 0 "cache scan"
check "cache scan table: header KEY VALUE" out_has '^KEY +VALUE$'
check "cache scan table: 6 entries, key2's value" \
	eval 'out_has "^\(6 entries\)$" && out_has "^key2 +value-2 with spaces$"'
ctl n2 cache scan "$KV" --json
check "cache scan --json: exactly key0..key5 with their values" \
	jout '.count == 6 and .truncated == false and ([.entries[] | "\(.key)=\(.value)"] | sort) == ["key0=overwritten", "key1=value-1 with spaces", "key2=value-2 with spaces", "key3=value-3 with spaces", "key4=value-4 with spaces", "key5=value-5 with spaces"]'
ctl n3 cache scan "$KV" --limit 2 --json
check "cache scan --limit 2: 2 entries, truncated" jout '.count == 2 and (.entries | length) == 2 and .truncated == true'
ctl n1 cache put nosuchcache k v
expect_rc 1 "cache put into a cache that does not exist"
check "cache put into nosuchcache: the error names it" err_has 'nosuchcache'

log "4. metrics"
ctl n1 metrics --json
expect_rc 0 "metrics --json"
check "metrics --json: node is n1" jout --arg id "${ID[n1]}" '.node == $id'
check "metrics --json: message types with sent > 0 (HEARTBEAT among them)" \
	jout '[.messages[] | select(.sent > 0)] | length > 0 and (map(.type) | index("HEARTBEAT") != null)'
check "metrics --json: $KV puts = the $NPUT puts made through n1" \
	jout --arg k "$KV" --argjson n "$NPUT" '.caches[] | select(.cache == $k) | .puts == $n'
check "metrics --json: $KV removes 0, gets 1 through n1 (the others went through n2, n3)" \
	jout --arg k "$KV" '.caches[] | select(.cache == $k) | .removes == 0 and .gets == 1'
check "metrics --json: the put latency counted $NPUT puts" \
	jout --arg k "$KV" --argjson n "$NPUT" '.caches[] | select(.cache == $k) | .put.count == $n'
ctl n1 metrics --all --json
check "metrics --all: more message types than without it" \
	eval 'test "$CRC" = 0 && test "$(jq ".messages | length" <<<"$OUT")" -gt "$(jq ".messages | length" <"$WORK/ctl$((CTL_N - 1)).out")"'
ctl n1 metrics
expect_rc 0 "metrics"
check "metrics table: message header and the cache header" \
	eval 'out_has "^MESSAGE TYPE +SENT +RECEIVED" && out_has "^CACHE +PUTS +GETS +REMOVES"'
check "metrics table: $KV row with $NPUT puts" out_has "^$KV +$NPUT +"

log "4b. cache destroy"
ctl n2 cache destroy "${KV}r"
check "cache destroy ${KV}r: exit 0" eval 'test "$CRC" = 0 && out_has "^destroyed cache ${KV}r$"'
gone_everywhere() {
	local n
	for n in n1 n2 n3; do
		ctl "$n" cache list --json
		jout --arg k "${KV}r" '[.caches[].name] | index($k) == null' || return 1
	done
}
wait_until 10000 "${KV}r gone from every node's cache list" gone_everywhere
ctl n1 cache get "${KV}r" key0
expect_rc 1 "cache get in the destroyed cache"
ctl n1 cache destroy "${KV}r"
expect_rc 1 "cache destroy of a cache that is gone"

log "5. tx list / tx kill"
LABEL=dgctl-held-$RANDOM
seeds_of n1 n2 n3
start_proc hold "$CACHECLIENT" "${SEEDS[@]}" --cache "$BANK" --failure-detection-timeout "$FT" \
	tx-hold --key acct7 --duration 60 --label "$LABEL"
wait_until 20000 "the holder holds its tx" eval 'has_line hold "^HOLDING " || ! alive hold'
has_line hold '^HOLDING ' || die "the holder exited: $(cat "$WORK/hold.out" "$WORK/hold.err" | tail -n 5)"
ctl n2 tx list --json
expect_rc 0 "tx list --json"
TXID=$(jq -r --arg l "$LABEL" '[.txs[] | select(.label == $l and .role == "near")][0].id // empty' <<<"$OUT")
log "the held tx: $TXID"
check "tx list --json: one near row with the label, PESSIMISTIC REPEATABLE_READ, 1 key" \
	jout --arg l "$LABEL" '[.txs[] | select(.label == $l and .role == "near")] | length == 1 and .[0].concurrency == "PESSIMISTIC" and .[0].isolation == "REPEATABLE_READ" and .[0].keys == 1 and .[0].state == "ACTIVE"'
check "tx list --json: its participant rows carry the near row's label and mode" \
	jout --arg l "$LABEL" '[.txs[] | select(.role != "near" and .label == $l and .concurrency == "PESSIMISTIC")] | length >= 1'
check "tx list --json: a primary row for it on a server" \
	jout --arg id "$TXID" --arg a "${URL[n1]} ${URL[n2]} ${URL[n3]}" \
	'[.txs[] | select(.id == $id and .role == "primary")] | length == 1 and (.[0].address as $x | $a | split(" ") | index($x) != null)'
check "tx list --json: the id is NEAR:SEQ" test -n "$(grep -E '^[0-9a-f]{16}:[0-9]+$' <<<"$TXID")"
ctl n1 tx list
expect_rc 0 "tx list"
check "tx list table: header row" out_has '^ID +NODE +ROLE +STATE +AGE +KEYS +MODE +LABEL$'
check "tx list table: the near row with its label" \
	out_has "^$TXID +tcp://[^ ]+ +near +ACTIVE +[0-9.]+m?s +1 +PESSIMISTIC REPEATABLE_READ +$LABEL$"
check "tx list table: the primary row" out_has "^$TXID +tcp://[^ ]+ +primary +ACTIVE "
ctl n1 tx list --min-age 1h --json
check "tx list --min-age 1h: no rows" eval 'test "$CRC" = 0 && jout ".txs | length == 0"'
ctl n3 tx kill 12345
expect_rc 1 "tx kill of a malformed id"
ctl n3 tx kill "$TXID"
expect_rc 0 "tx kill $TXID (through n3, not its near node)"
check "tx kill: says rolled back" out_has "^rolled back $TXID$"
wait_until 10000 "the holder ends" eval '! alive hold'
reap hold
log "holder: $(tr '\n' ' ' <"$WORK/hold.out")"
check "the holder's commit failed with DG_ERR_TX_ROLLED_BACK (exit ${RC[hold]})" \
	eval 'test "${RC[hold]}" = 1 && has_line hold "^tx-hold result=DG_ERR_TX_ROLLED_BACK"'
ctl n3 tx kill "$TXID"
expect_rc 1 "a second tx kill of $TXID"
check "the second kill says there is no such tx" err_has "no running transaction $TXID"
wait_until 10000 "the holder left: 3 nodes" agree_nodes 3 n1 n2 n3
# the participants' records go when the near's rollback reaches them
no_rows() {
	CTL_QUIET=1 ctl n1 tx list --json &&
		jout --arg id "$TXID" '[.txs[] | select(.id == $id)] | length == 0'
}
wait_until 10000 "tx list after the kill: no row of $TXID" no_rows
log "ok: tx list after the kill: no row of $TXID (${WAITED_MS} ms)"

log "6. idle-verify, debug without test hooks"
ctl n1 idle-verify --json
check "idle-verify: exit 0, no divergence, 2 caches x 1024 partitions checked" \
	eval 'test "$CRC" = 0 && jout ".divergent_count == 0 and .partitions_checked == 2048 and .nodes_unanswered == 0"'
ctl n1 idle-verify
check "idle-verify table: no divergence" eval 'test "$CRC" = 0 && out_has "^no divergence"'
ctl n1 idle-verify nosuchcache
expect_rc 1 "idle-verify nosuchcache"
ctl n1 debug put-local "$KV" key1 corrupt
expect_rc 1 "debug put-local without DG_ADMIN_TEST_HOOKS"
check "debug put-local: the error says the hooks are off" err_has 'test hooks are off'

log "7. rebalance status; a 4th node joins"
ctl n2 rebalance status --json
check "rebalance status --json: complete, nothing moving" \
	eval 'test "$CRC" = 0 && jout ".complete == true and .partitions_moving == 0"'
ctl n2 rebalance status
check "rebalance status table: complete, header, the $BANK row" \
	eval 'test "$CRC" = 0 && out_has "rebalancing complete$" && out_has "^CACHE +MOVING +DONE +LEFT +RECEIVED +LOST +REPAIRING$" && out_has "^$BANK +0 "'
# data to move (small rebalancing batches: the move takes a while)
seeds_of n1
client fill 30000 "${SEEDS[@]}" --cache "$KV" --failure-detection-timeout "$FT" put --count $NFILL
check "fill: $NFILL puts acknowledged" test "$CLIENT_RC" = 0
wait_until 10000 "the fill client left: 3 nodes" agree_nodes 3 n1 n2 n3
start_admin_node n4 "${NODE_ARGS[@]}" --seed "${URL[n1]}"
# watch from the moment n1 installs the 4-node topology
wait_until 15000 "n1 installs a 4-node topology" eval 'dg_topo n1; ((TC == 4))'
CTL_LIMIT_S=30 ctl n1 rebalance status --watch --interval 50ms
check "rebalance status --watch: exit 0 within 30 s" test "$CRC" = 0
check "rebalance status --watch: progress lines, then 'rebalancing complete'" \
	eval 'out_has "^\[[#.]{40}\] [0-9]+/[0-9]+ partitions" && test "$(tail -n 1 <<<"$OUT")" = "rebalancing complete"'
log "the watch printed $(grep -c partitions <<<"$OUT") progress lines, $(grep partitions <<<"$OUT" | grep -c -v -E ' 0 moving$' || true) of them with partitions moving"
wait_until 15000 "n1..n4 agree on 4 nodes" agree_nodes 4 n1 n2 n3 n4
V4=$AGREED_V
CTL_LIMIT_S=30 ctl n1 rebalance status --watch --interval 100ms --json
OUT=$(tail -n 1 <<<"$OUT")
check "rebalance status --watch --json: exit 0, the last line complete at version $V4" \
	eval 'test "$CRC" = 0 && jout --argjson v "$V4" ".complete == true and .topology_version == \$v"'
wait_admin_node n4
ctl n4 state --json
check "state --json (n4): 4 servers, ACTIVE, version $V4" \
	jout --argjson v "$V4" '.servers == 4 and .state == "ACTIVE" and .topology_version == $v'

log "8. authentication, shutdown, dead and silent ports"
DG_CLUSTER_SECRET=not-the-secret ctl n1 state
expect_rc 1 "state with a wrong secret"
check "wrong secret: authentication failed" err_has 'authentication failed'
(unset DG_CLUSTER_SECRET; ctl n1 state; echo "$CRC" >"$WORK/nosecret.rc"; echo "$ERR" >"$WORK/nosecret.err")
check "state without a secret: exit 1, authentication failed" \
	eval 'test "$(<"$WORK/nosecret.rc")" = 1 && grep -q "authentication failed" "$WORK/nosecret.err"'
ctl n4 shutdown --json
check "shutdown (n4) --json: exit 0, stopping n4" \
	eval 'test "$CRC" = 0 && jout --arg id "${ID[n4]}" "[.stopping[].id] == [\$id]"'
wait_exit n4 20000
check "n4 exited 0 after dgctl shutdown (got ${RC[n4]}, $WAITED_MS ms)" test "${RC[n4]}" = 0
check "n4 logged ADMIN-SHUTDOWN" has_log n4 ' id=ADMIN-SHUTDOWN '
wait_until 10000 "n1..n3 agree on 3 nodes" agree_nodes 3 n1 n2 n3
ctl n1 nodes --json
check "nodes after the shutdown: 3, without n4" \
	jout --arg id "${ID[n4]}" '(.nodes | length) == 3 and ([.nodes[].id] | index($id)) == null'
ctl n1 nodes
check "nodes table after the shutdown: 3 rows" \
	test "$(grep -c -E '^ +[0-9]+ +[0-9a-f]{16} ' <<<"$OUT")" = 3

# a cache without backups loses n3's partitions with n3: LOST until
# cache reset-lost, then served (empty) again
ctl n1 cache create lossy --backups 0 --json
expect_rc 0 "cache create lossy (backups 0)"
lossy_rebalanced() { ctl n1 rebalance status --json && jout '.complete == true'; }
wait_until 20000 "rebalancing complete with lossy" lossy_rebalanced
for i in $(seq 0 29); do
	ctl n1 cache put lossy "l$i" "v$i"
	[[ $CRC == 0 ]] || check "cache put lossy l$i" false
done
kill9_node n3
ctl n3 --timeout 2s state
expect_rc 1 "state at n3's admin port after kill -9"
check "dead node: cannot connect on stderr" err_has 'cannot connect'
check "dead node: exit within 3 s (took $CTL_MS ms)" test "$CTL_MS" -lt 3000
wait_until 10000 "n1, n2 agree on 2 nodes" agree_nodes 2 n1 n2
ctl n2 nodes --json
check "nodes after the kill: 2" jout '(.nodes | length) == 2'
lost_seen() { ctl n1 state --json && jout '.state == "LOST_PARTITIONS" and .partitions_lost > 0'; }
wait_until 10000 "n1's state LOST_PARTITIONS" lost_seen
nlost=0
for i in $(seq 0 29); do
	ctl n2 cache get lossy "l$i"
	if [[ $CRC != 0 ]] && err_has 'PARTITION_LOST|partition lost'; then nlost=$((nlost + 1)); fi
done
check "some of lossy's 30 keys are on lost partitions ($nlost)" test "$nlost" -gt 0
ctl n2 cache reset-lost lossy --json
check "cache reset-lost: exit 0, lost before > 0, none after" \
	eval 'test "$CRC" = 0 && jout ".lost_here_before > 0 and .lost_here_after == 0"'
ctl n1 cache reset-lost lossy
check "cache reset-lost table line" eval 'test "$CRC" = 0 && out_has "LOST here: 0 before, 0 after"'
ctl n1 state --json
check "state after reset-lost: not LOST_PARTITIONS" jout '.state != "LOST_PARTITIONS" and .partitions_lost == 0'
nlost=0 nfound=0
for i in $(seq 0 29); do
	ctl n2 cache get lossy "l$i"
	if [[ $CRC == 0 ]]; then nfound=$((nfound + 1));
	elif err_has 'PARTITION_LOST|partition lost'; then nlost=$((nlost + 1)); fi
done
check "after reset-lost no key is on a lost partition ($nlost), the others kept ($nfound found)" \
	eval 'test "$nlost" = 0 && test "$nfound" -gt 0 && test "$nfound" -lt 30'
ctl_port "${PORT_OF[n1]}" --timeout 2s state
expect_rc 1 "state at n1's cluster port (accepts, speaks another protocol)"
check "cluster port: exit within 2.5 s (took $CTL_MS ms)" test "$CTL_MS" -lt 2500
ctl_port "${HPORT[n1]}" --timeout 2s state
expect_rc 1 "state at n1's http port"
check "http port: exit within 2.5 s (took $CTL_MS ms)" test "$CTL_MS" -lt 2500

log "9. shutdown --cluster"
ctl n2 shutdown --cluster --json
check "shutdown --cluster (n2): exit 0, stopping n1 and n2" \
	eval 'test "$CRC" = 0 && jout --arg a "${ID[n1]}" --arg b "${ID[n2]}" "([.stopping[].id] | sort) == ([\$a, \$b] | sort) and all(.stopping[]; .error == null)"'
for n in n1 n2; do
	wait_exit "$n" 20000
	check "$n exited 0 after shutdown --cluster (got ${RC[$n]}, $WAITED_MS ms)" test "${RC[$n]}" = 0
done
finish
