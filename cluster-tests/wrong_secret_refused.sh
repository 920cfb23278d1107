#!/usr/bin/env bash
# wrong_secret_refused: a 2-node cluster with secret A.  A third node with
# secret B, seeding both members, must not get in: it never prints READY and
# exits non-zero after its join timeout (--join-timeout 2000).  So must a
# node with no secret at all.  The cluster's topology stays as it was (no new
# version) and the refusals are counted:
#   - wrong secret: the intruder (the dialer) finds the seed's CHALLENGE MAC
#     wrong and counts an auth failure; the seed sees a handshake abandoned
#     after its CHALLENGE (PROTOCOL.md: "D closes without a word") and counts
#     a handshake failure — it cannot tell a wrong secret from a dropped
#     connection;
#   - no secret: the seed refuses the HELLO (REJECT AUTH) and counts an auth
#     failure.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

printf 'secret-A-%s\n' "$RANDOM$RANDOM" >"$WORK/secret-a"
printf 'secret-B-%s\n' "$RANDOM$RANDOM" >"$WORK/secret-b"
chmod 600 "$WORK"/secret-*
JT=2000

start_node n1 --secret-file "$WORK/secret-a" --stats
wait_ready n1
start_node n2 --secret-file "$WORK/secret-a" --stats --seed "${ADDR[n1]}"
wait_ready n2
wait_until 10000 "n1, n2 agree on a 2-node topology" agree_count 2 n1 n2
V0=$AGREED_V N0=$AGREED_N C1=$(topo_count n1) C2=$(topo_count n2)
log "cluster up (secret A): version=$V0 nodes=$N0"

sum_failures() { stats n1; F1=$((SA + SH)); stats n2; F2=$((SA + SH)); }
# counters before the intruders: a fresh STATS line after the agreement
stats_fresh() {
	local c1 c2
	c1=$(grep -c '^STATS ' "$WORK/n1.out" || true)
	c2=$(grep -c '^STATS ' "$WORK/n2.out" || true)
	wait_until 2000 "fresh STATS lines" eval \
		"(( \$(grep -c '^STATS ' '$WORK/n1.out') > $c1 && \$(grep -c '^STATS ' '$WORK/n2.out') > $c2 ))"
}
stats_fresh
stats n1; A1=$SA H1=$SH
stats n2; A2=$SA H2=$SH
log "before: n1 auth_failures=$A1 handshake_failures=$H1; n2 auth_failures=$A2 handshake_failures=$H2"

# intruder NAME ARGS...: starts a node that must not get in; checks it.
intruder() {
	local name=$1
	shift
	start_node "$name" --stats --join-timeout $JT --seed "${ADDR[n1]}" --seed "${ADDR[n2]}" "$@"
	# it must give up by itself: join timeout + margin for start and stop
	wait_until $((JT + 8000)) "$name to exit or print READY" \
		eval "has_line $name '^READY ' || ! alive $name"
	if has_line "$name" '^READY '; then
		local line
		line=$(grep '^TOPOLOGY ' "$WORK/$name.out" | tail -n 1)
		check "$name never prints READY (it printed: $(grep -m1 '^READY ' "$WORK/$name.out"); $line)" false
		stop_node "$name"
	else
		wait_exit "$name" 2000
		check "$name never prints READY" true
		check "$name exits non-zero (got ${RC[$name]})" test "${RC[$name]}" -ne 0
	fi
	stats "$name"
	INTRUDER_SA=$SA
}

log "intruder x1: secret B"
intruder x1 --secret-file "$WORK/secret-b"
check "x1 counted the seeds' bad CHALLENGE MAC as auth failures (auth_failures=$INTRUDER_SA)" \
	test "$INTRUDER_SA" -ge 1
# a seed counts an abandoned handshake when it sees the connection end,
# which may come after x1's exit: poll the seeds' STATS lines for it
counted() { stats "$1"; ((SA + SH > $2)); }
wait_until 5000 "n1 counted x1's abandoned handshakes" counted n1 $((A1 + H1))
log "ok: n1 counted x1's abandoned handshakes"
wait_until 5000 "n2 counted x1's abandoned handshakes" counted n2 $((A2 + H2))
log "ok: n2 counted x1's abandoned handshakes"
stats n1; dA1=$((SA - A1)) dH1=$((SH - H1)); A1=$SA H1=$SH
stats n2; dA2=$((SA - A2)) dH2=$((SH - H2)); A2=$SA H2=$SH
log "x1 at the seeds: n1 +$dA1 auth +$dH1 handshake; n2 +$dA2 auth +$dH2 handshake"

log "intruder x2: no secret"
intruder x2
auth_counted() { stats "$1"; ((SA > $2)); }
wait_until 5000 "n1 counted x2's HELLO without a secret as an auth failure" auth_counted n1 "$A1"
log "ok: n1 counted x2's HELLO without a secret as an auth failure"
wait_until 5000 "n2 counted x2's HELLO without a secret as an auth failure" auth_counted n2 "$A2"
log "ok: n2 counted x2's HELLO without a secret as an auth failure"
stats n1; dA1=$((SA - A1))
stats n2; dA2=$((SA - A2))
log "x2 at the seeds: n1 +$dA1 auth failures, n2 +$dA2 auth failures"

check "the cluster's topology is unchanged (version=$V0 nodes=$N0)" agree "$N0" n1 n2
check "n1, n2 installed no new version meanwhile" \
	test "$(topo_count n1) $(topo_count n2)" = "$C1 $C2"
for x in x1 x2; do
	xid=$(sed -n 's/.*TRANSPORT-UP node=\([0-9a-f]*\).*/\1/p' "$WORK/$x.err" | head -n 1)
	check "$x (id ${xid:-?}) is in no topology of n1, n2" \
		eval "[[ -n '$xid' ]] && ! grep -q '$xid' '$WORK/n1.out' '$WORK/n2.out'"
done

stop_all_checked
finish
