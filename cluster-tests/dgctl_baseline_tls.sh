#!/usr/bin/env bash
# dgctl_baseline_tls: `dgctl baseline` against real dgnodes, and dgctl over
# TLS with the cluster secret.
#  1. 3 dgnodes, cache kv (backups=0: a decommission that dropped a copy
#     would lose keys), 2000 keys written by a cacheclient;
#  2. baseline: auto at first (table and JSON); `baseline set` of n1, n2 →
#     n3 is standby (baseline --json, nodes --json standby, state), its
#     primary entries go to 0 once rebalancing is complete, every key is
#     still there; a baseline without an online node is refused (exit 1);
#     `baseline add` n3 → it owns partitions again; `baseline remove` n1
#     (a decommission) → rebalancing completes, then n1 is killed with
#     SIGKILL and every key is still readable: the hand-over kept them
#     (the baseline lists n2 and n3 only);
#     usage errors exit 2;
#  3. TLS: a dgnode on tls+tcp:// with a certificate from the deployment
#     guide's openssl commands and a secret; dgctl with --url tls+tcp://,
#     --tls-ca, --tls-cert-key and --secret-file runs `nodes`; without the
#     client certificate it is a usage error (2); with a CA that did not
#     sign the node's certificate it fails (1) within its timeout.
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

FT=1000
KEYS=2000
NODE_ARGS=(--failure-detection-timeout "$FT" --cache "kv,backups=0")
CLIENT_ARGS=(--cache kv --failure-detection-timeout "$FT")

log "1. three servers, $KEYS keys"
start_three "${NODE_ARGS[@]}"
seeds_of n1 n2 n3
client put1 60000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" put --count "$KEYS"
[[ $CLIENT_RC == 0 ]] || die "the puts failed: nothing to test"
wait_until 10000 "the client left: 3 nodes" agree_nodes 3 n1 n2 n3

# every key still there, read through a client node
verify_all() {
	client "verify$1" 60000 "${SEEDS[@]}" "${CLIENT_ARGS[@]}" verify --count "$KEYS" --round 1
	check "every key readable $2 (exit $CLIENT_RC)" test "$CLIENT_RC" = 0
}
rebalanced() { CTL_QUIET=1 ctl n2 rebalance status --json && jout '.complete == true'; }
primary_entries() {   # NODE: its primary entries of kv, from metrics
	CTL_QUIET=1 ctl "$1" metrics --json
	jq -r '.caches[] | select(.cache == "kv") | .primary_entries' <<<"$OUT"
}
no_primaries() { [[ $(primary_entries "$1") == 0 ]]; }
some_primaries() { [[ $(primary_entries "$1") -gt 0 ]]; }

log "2. baseline"
ctl n1 baseline
check "baseline: auto at first" eval 'test "$CRC" = 0 && out_has "baseline: auto"'
ctl n1 baseline --json
check "baseline --json: auto, none standby" jout '.auto == true and .standby == []'
ctl n1 baseline set "${URL[n1]}" "${URL[n2]}"
expect_rc 0 "baseline set n1 n2"
# the set returned once n1 (which took the command) installed the new
# version; n2 and n3 install it when its TOPOLOGY reaches them
n2_sees_set() {
	CTL_QUIET=1 ctl n2 baseline --json &&
		jout --arg a "${URL[n1]}" --arg b "${URL[n2]}" --arg c "${URL[n3]}" \
		'.auto == false and ([.baseline[] | select(.online) | .address] | sort) == ([$a, $b] | sort) and [.standby[].address] == [$c]'
}
wait_until 10000 "baseline --json (n2): n1, n2 online; n3 standby" n2_sees_set
log "ok: baseline --json (n2): n1, n2 online; n3 standby"
n3_sees_standby() {
	CTL_QUIET=1 ctl n3 nodes --json && jout --arg c "${URL[n3]}" '[.nodes[] | select(.standby) | .address] == [$c]'
}
wait_until 10000 "nodes --json (n3): n3 standby, n1 and n2 not" n3_sees_standby
log "ok: nodes --json (n3): n3 standby, n1 and n2 not"
ctl n3 nodes
check "nodes table: n3's role says standby" out_has "${URL[n3]} +server,standby"
ctl n1 state --json
check "state --json: baseline set, 1 standby" jout '.baseline_set == true and .standby == 1'
wait_until 20000 "rebalancing complete after the set" rebalanced
wait_until 10000 "n3 holds no primary copy" no_primaries n3
verify_all 1 "with n3 standby"

ctl n1 baseline set tcp://127.0.0.1:1
expect_rc 1 "a baseline of no online node is refused"
check "  ... saying why" err_has "no online server node"
ctl n1 baseline add
expect_rc 2 "baseline add without an address: usage"
ctl n1 baseline frob x
expect_rc 2 "baseline frob: usage"

ctl n1 baseline add "${URL[n3]}"
expect_rc 0 "baseline add n3"
wait_until 20000 "rebalancing complete after the add" rebalanced
wait_until 10000 "n3 owns primaries again" some_primaries n3

ctl n2 baseline remove "${URL[n1]}"
expect_rc 0 "baseline remove n1 (decommission)"
wait_until 20000 "rebalancing complete after the remove" rebalanced
wait_until 10000 "n1 holds no primary copy" no_primaries n1
kill -9 "${PID[n1]}"
reap n1
wait_until 10000 "n2, n3 agree on 2 nodes" agree_nodes 2 n2 n3
verify_all 2 "after n1, decommissioned, was killed (backups=0)"
# n2 took the remove and n2, n3 agree on the topology without n1
ctl n2 baseline --json
check "baseline --json: n2, n3 online, n1 gone from it" \
	jout --arg b "${URL[n2]}" --arg c "${URL[n3]}" \
	'([.baseline[] | select(.online) | .address] | sort) == ([$b, $c] | sort) and (.baseline | length) == 2 and .standby == []'
stop_all_checked

log "3. dgctl over TLS"
command -v openssl >/dev/null || { log "no openssl binary: TLS part skipped"; finish; }
make_tls_files "$WORK/tls"
free_port
TP=$PORT
free_port
TA=$PORT
start_proc t1 "$DGNODE" --listen "tls+tcp://127.0.0.1:$TP" \
	--admin-listen "tls+tcp://127.0.0.1:$TA" --http-listen none \
	--tls-cert-key "$WORK/tls/node.pem" --tls-ca "$WORK/tls/ca.pem" \
	--secret-file "$WORK/tls/secret"
wait_dgnode t1
check "t1's admin endpoint is TLS" has_log t1 " admin=tls\+tcp://127\.0\.0\.1:$TA "
TLS_ARGS=(--url "tls+tcp://127.0.0.1:$TA" --tls-ca "$WORK/tls/ca.pem"
	--tls-cert-key "$WORK/tls/dgctl.pem" --secret-file "$WORK/tls/secret")
ctl_raw "${TLS_ARGS[@]}" nodes --json
check "nodes over TLS: exit 0, one node at t1's address (exit $CRC)" \
	eval 'test "$CRC" = 0 && jout --arg a "tls+tcp://127.0.0.1:$TP" "[.nodes[].address] == [\$a]"'
ctl_raw --url "tls+tcp://127.0.0.1:$TA" --tls-ca "$WORK/tls/ca.pem" \
	--secret-file "$WORK/tls/secret" state
expect_rc 2 "tls+tcp:// without --tls-cert-key: usage"
ctl_raw --timeout 3s --url "tls+tcp://127.0.0.1:$TA" --tls-ca "$WORK/tls/other.pem" \
	--tls-cert-key "$WORK/tls/dgctl.pem" --secret-file "$WORK/tls/secret" state
expect_rc 1 "a CA that did not sign the node's certificate: refused"
check "  ... within the timeout (${CTL_MS} ms)" test "$CTL_MS" -lt 6000
ctl_raw --timeout 3s --url "tcp://127.0.0.1:$TA" --secret-file "$WORK/tls/secret" state
expect_rc 1 "plain tcp:// to a TLS endpoint: fails"
check "  ... within the timeout (${CTL_MS} ms)" test "$CTL_MS" -lt 6000
stop_all_checked
finish
