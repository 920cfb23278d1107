#!/usr/bin/env bash
# garbage_and_oversized: raw TCP connections (bash /dev/tcp) to the first
# node of a running 2-node cluster, each before any handshake:
#   1. random garbage (first byte 0xde: never a valid version);
#   2. a header claiming a huge body: version 1, type 1 (HELLO), body length
#      0x7fffffff, then nothing;
#   3. a well-formed HELLO header whose 64-byte body is garbage;
#   4. a connection that sends nothing (kept open meanwhile).
# The node closes 1-3 at once and counts them (malformed frames for 1-2, a
# handshake failure for 3); it closes 4 when the handshake deadline (the
# connect timeout, 5 s) passes and counts a handshake failure.  Meanwhile
# the cluster still works: a third node joins and all three agree on the
# 3-node topology.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

start_node n1 --stats
wait_ready n1
start_node n2 --stats --seed "${ADDR[n1]}"
wait_ready n2
wait_until 10000 "n1, n2 agree on a 2-node topology" agree_count 2 n1 n2
log "cluster up: version=$AGREED_V nodes=$AGREED_N"
[[ ${ADDR[n1]} =~ ^tcp://127\.0\.0\.1:([0-9]+)$ ]] || die "unexpected address ${ADDR[n1]}"
PORT=${BASH_REMATCH[1]}

# Counters after a STATS line printed from now on.
fresh_stats() {
	local c
	c=$(grep -c '^STATS ' "$WORK/n1.out" || true)
	wait_until 2000 "a fresh STATS line from n1" \
		eval "(( \$(grep -c '^STATS ' '$WORK/n1.out') > $c ))"
	stats n1
}
# wait_stat VAR MIN: waits until n1's STATS show VAR (SM or SH) >= MIN.
stat_at_least() { stats n1; (( ${!1} >= $2 )); }

# probe NAME FILE COUNTER: sends FILE on a fresh connection, checks the node
# closes it and counts it in COUNTER (SM malformed, SH handshake failures).
probe() {
	local what=$1 file=$2 var=$3 fd rc=0
	fresh_stats
	local before=${!var}
	exec {fd}<>/dev/tcp/127.0.0.1/"$PORT"
	cat "$file" >&"$fd"
	# the node must close it: EOF (or a reset) well before 5 s
	timeout 5 cat <&"$fd" >/dev/null 2>&1 || rc=$?
	exec {fd}>&-
	check "$what: n1 closed the connection" test "$rc" -ne 124
	wait_until 3000 "n1 to count $what" stat_at_least "$var" $((before + 1))
	log "$what: counted ($var $before -> ${!var})"
}

# 1. garbage
{ printf '\xde\xad'; head -c 510 /dev/urandom; } >"$WORK/garbage.bin"
probe "random garbage" "$WORK/garbage.bin" SM

# 2. header: version 1, flags 0, type 1 (LE), body length 0x7fffffff (LE),
#    correlation id 0, sender 0
printf '\x01\x00\x01\x00\xff\xff\xff\x7f' >"$WORK/huge.bin"
head -c 16 /dev/zero >>"$WORK/huge.bin"
check "the oversized header is 24 bytes" test "$(stat -c %s "$WORK/huge.bin")" -eq 24
probe "header claiming a 0x7fffffff-byte body" "$WORK/huge.bin" SM

# 3. HELLO header with a 64-byte body of garbage (0xde...: no valid tag)
printf '\x01\x00\x01\x00\x40\x00\x00\x00' >"$WORK/badhello.bin"
head -c 16 /dev/zero >>"$WORK/badhello.bin"
{ printf '\xde'; head -c 63 /dev/urandom; } >>"$WORK/badhello.bin"
probe "HELLO with a garbage body" "$WORK/badhello.bin" SH

# 4. connect and send nothing; keep it open while a node joins
fresh_stats
H0=$SH
now_ms
t_idle=$NOW
exec {idle}<>/dev/tcp/127.0.0.1/"$PORT"
log "idle connection open (sends nothing)"

start_node n3 --stats --seed "${ADDR[n1]}"
wait_ready n3
wait_until 10000 "n1, n2, n3 agree on a 3-node topology" agree_count 3 n1 n2 n3
log "the cluster still works: n3 joined, version=$AGREED_V nodes=$AGREED_N"
check "n3 is in the agreed topology" eval "[[ ,$AGREED_N, == *,${ID[n3]},* ]]"

rc=0
timeout 10 cat <&"$idle" >/dev/null 2>&1 || rc=$?
exec {idle}>&-
now_ms
idle_ms=$((NOW - t_idle))
check "n1 closed the idle connection (after $idle_ms ms; handshake deadline 5000 ms)" \
	test "$rc" -ne 124
wait_until 3000 "n1 to count the idle connection" stat_at_least SH $((H0 + 1))
log "idle connection counted as a handshake failure (handshake_failures $H0 -> $SH)"

stats n1
log "n1 totals: auth_failures=$SA handshake_failures=$SH malformed=$SM"
check "n1 counted 2 malformed frames" test "$SM" -eq 2
check "n1 is still in the same 3-node topology" agree "$AGREED_N" n1 n2 n3
for n in n1 n2 n3; do check "$n is still running" alive "$n"; done
stop_all_checked
finish
