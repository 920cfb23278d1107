#!/usr/bin/env bash
# dgctl_large_values: what the dgctl binary does with large values (the
# admin wire itself is tests/node_admin_test.c, test_admin_*_large_values).
# One dgnode server, cache "big" (partitioned, no backups):
#  1. `dgctl cache put big k VALUE` of a 1.5 MiB value: stored whole (get
#     returns it), or refused at once by dgctl saying what the limit is.
#     (Through --value-file when `dgctl cache --help` offers it.)
#  2. a value of 128000 bytes (what one argv string can carry) round-trips
#     through put and get;
#  3. 300 keys of 128000 non-ASCII bytes (each 256 KiB of "0x" + hex in an
#     answer): `cache scan big --limit 100 --json` (25 MiB, past a peer
#     frame) exits 0 with 100 whole values; `--limit 1000` (77 MiB, past
#     the admin frame, DGI_ADMIN_FRAME_MAX = 64 MiB) exits 0 with whole
#     values (cut ones marked truncated), or exits 1 naming the limit — not
#     "the node closed the connection" — within the default --timeout;
#  4. the node still serves `dgctl state`.
# Every dgctl run is bounded (ctllib.sh: timeout), every process is stopped
# by lib.sh's EXIT trap.  Run: bash dgctl_large_values.sh DGNODE CACHECLIENT DGCTL
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

export DG_CLUSTER_SECRET=dgctl-large-secret-$RANDOM$RANDOM
unset DG_ADMIN_TEST_HOOKS
NKEYS=${DG_LARGE_KEYS:-300}
ARGV_VALUE=128000   # below MAX_ARG_STRLEN (128 KiB with its NUL)

# big_put NODE KEY FILE: dgctl cache put big KEY <FILE's bytes> (argv), or
# --value-file FILE when dgctl has it; CRC, ERR, CTL_MS (the value is not
# logged).
HAS_VALUE_FILE=0
big_put() {
	local node=$1 key=$2 file=$3 t0
	now_ms
	t0=$NOW
	CRC=0
	if ((HAS_VALUE_FILE)); then
		timeout -k 2 30 "$DGCTL" --port "${APORT[$node]}" cache put big "$key" \
			--value-file "$file" >"$WORK/put.out" 2>"$WORK/put.err" </dev/null || CRC=$?
	else
		timeout -k 2 30 "$DGCTL" --port "${APORT[$node]}" cache put big "$key" \
			"$(<"$file")" >"$WORK/put.out" 2>"$WORK/put.err" </dev/null || CRC=$?
	fi
	now_ms
	CTL_MS=$((NOW - t0))
	ERR=$(head -c 2000 "$WORK/put.err")
}

log "0. one server"
start_admin_node n1 --cache "big,mode=partitioned,backups=0"
wait_admin_node n1
wait_active n1 1 15000
ctl n1 cache --help
if out_has 'value-file'; then
	HAS_VALUE_FILE=1
fi
log "dgctl cache put takes --value-file: $HAS_VALUE_FILE"

log "1. put a 1.5 MiB value through dgctl"
# printable: base64 of random bytes, cut to the size (no pipe into head:
# pipefail would see base64's SIGPIPE)
printable_file() {
	head -c "$1" /dev/urandom | base64 -w 0 >"$2.b64"
	head -c "$1" "$2.b64" >"$2"
	rm -f "$2.b64"
}
printable_file $((3 * 1024 * 1024 / 2)) "$WORK/v15"
big_put n1 large "$WORK/v15"
log "put of 1.5 MiB -> exit $CRC, $CTL_MS ms, stderr: ${ERR//$'\n'/ | }"
if [[ $CRC == 0 ]]; then
	CTL_QUIET=1 ctl n1 cache get big large
	printf '%s' "$OUT" >"$WORK/got15"
	check "get of the 1.5 MiB value: exit 0, whole" \
		eval 'test "$CRC" = 0 && cmp -s "$WORK/v15" "$WORK/got15"'
else
	check "put of 1.5 MiB refused at once (exit $CRC in $CTL_MS ms) by dgctl naming the limit: ${ERR:0:200}" \
		eval '((CTL_MS < 5000)) && grep -q -E "dgctl: .*(limit|too large|bytes)" <<<"$ERR"'
fi

log "2. a value of $ARGV_VALUE bytes round-trips"
printable_file "$ARGV_VALUE" "$WORK/vsmall"
big_put n1 argvmax "$WORK/vsmall"
check "put of $ARGV_VALUE bytes: exit 0 (got $CRC: ${ERR:0:200})" test "$CRC" = 0
CTL_QUIET=1 ctl n1 cache get big argvmax
printf '%s' "$OUT" >"$WORK/gotsmall"
check "get of $ARGV_VALUE bytes: whole" cmp -s "$WORK/vsmall" "$WORK/gotsmall"

log "3. $NKEYS keys of $ARGV_VALUE non-ASCII bytes"
# bytes 0x80..0xff: not printable, so answers carry them as 0x + hex
head -c "$ARGV_VALUE" /dev/urandom | tr '\000-\177' '\200-\377' >"$WORK/vhi"
printf '0x%s' "$(od -An -v -tx1 "$WORK/vhi" | tr -d ' \n')" >"$WORK/vhi.hex"
rm -f "$WORK/argvmax" "$WORK/gotsmall" "$WORK/got15"
ctl n1 cache remove big large
ctl n1 cache remove big argvmax
for ((i = 0; i < NKEYS; i++)); do
	big_put n1 "h$i" "$WORK/vhi"
	[[ $CRC == 0 ]] || die "put h$i failed (exit $CRC): ${ERR:0:300}"
done
log "put $NKEYS keys"
CTL_QUIET=1 ctl n1 cache scan big --limit 100 --json
check "scan --limit 100 (25 MiB answer): exit 0 in $CTL_MS ms (got $CRC: ${ERR:0:200})" \
	test "$CRC" = 0
check "scan --limit 100: count 100, truncated, every value whole" \
	jout --rawfile h "$WORK/vhi.hex" \
	'.count == 100 and .truncated == true and (.entries | length) == 100 and ([.entries[].value == $h] | all)'

CTL_QUIET=1 ctl n1 cache scan big --limit 1000 --json
log "scan --limit 1000 (77 MiB answer) -> exit $CRC, $CTL_MS ms, stderr: ${ERR:0:300}"
if [[ $CRC == 0 ]]; then
	check "scan --limit 1000: whole values; all $NKEYS or marked truncated" \
		jout --rawfile h "$WORK/vhi.hex" --argjson n "$NKEYS" \
		'([.entries[].value == $h] | all) and (.count == (.entries | length)) and (.count == $n or .truncated == true)'
else
	check "scan --limit 1000: refused naming the limit, not a dropped connection: ${ERR:0:200}" \
		eval 'err_has "(limit|too large|MiB|bytes)" && ! err_has "closed the connection"'
fi
check "scan --limit 1000 answered within the default --timeout (${CTL_MS} ms)" \
	test "$CTL_MS" -lt 5000

log "4. the node still serves"
ctl n1 state --json
check "state: exit 0" test "$CRC" = 0
check "n1 still running" alive n1
finish
