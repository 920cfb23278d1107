#!/usr/bin/env bash
# encryption_at_rest: a dgnode with --encryption-key-file and a persistent
# cache (issue 14, "Encryption at rest"):
#  1. 500 keys put through a client node ("k<i>" = "v<i>-r1"); no value
#     appears in the data file (grep -c of "-r1" in data.mdb is 0);
#  2. a key file readable by others is refused at start (ENCRYPTION-KEY,
#     exit 1); so is a start without a key file, and with another key
#     (STORAGE-KEY, exit 1) — the store untouched;
#  3. a new key written to the file, `dgctl encryption rotate`, SIGTERM,
#     restart with the new key: every key verifies; the old key is refused.
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"
command -v openssl >/dev/null || skip "no openssl binary"

N=500
CACHE=ekv
export DG_CLUSTER_SECRET=encryption-test-$RANDOM$RANDOM
CLIENT_ARGS=(--cache "$CACHE" --threads 4 --failure-detection-timeout 2000)
KEYS=$WORK/keys
mkdir -m 700 "$KEYS"
(umask 077; openssl rand -hex 32 >"$KEYS/k1"; openssl rand -hex 32 >"$KEYS/k2")
cp "$KEYS/k1" "$KEYS/node.key"
chmod 600 "$KEYS/node.key"
DATA=$WORK/data
NODE_ARGS=(--data-dir "$DATA" --cache "$CACHE,persistence=true"
	--failure-detection-timeout 2000)

# a node started on the same ports every time (start_admin_node picks new
# ones): port, admin port, http none
free_port
P=$PORT
free_port
A=$PORT
node() { # NAME KEYFILE-ARGS...
	local name=$1
	shift
	PORT_OF[$name]=$P
	APORT[$name]=$A
	start_dgnode "$name" "$P" --admin-listen "tcp://127.0.0.1:$A" --http-listen none \
		"${NODE_ARGS[@]}" "$@"
}
refused() { # NAME WHY-ERE KEYFILE-ARGS...: the start fails (exit 1) saying WHY
	local name=$1 why=$2
	shift 2
	node "$name" "$@"
	wait_exit "$name" 15000
	check "$name: refused (exit ${RC[$name]})" test "${RC[$name]}" = 1
	check "$name: the log says why ($why)" grep -q -E "$why" "$WORK/$name.err"
}

log "1. $N keys into an encrypted persistent cache"
node e1 --encryption-key-file "$KEYS/node.key"
wait_dgnode e1
client put1 60000 --seed "${URL[e1]}" "${CLIENT_ARGS[@]}" put --count "$N" --round 1
check "put: every key acknowledged (exit $CLIENT_RC)" test "$CLIENT_RC" = 0
stop_node e1
check "no value in the data file" test "$(grep -a -c -e '-r1' "$DATA/data.mdb" || true)" = 0

log "2. refused: an open key file, no key file, another key"
chmod 644 "$KEYS/node.key"
refused e2 'id=ENCRYPTION-KEY .*mode 0644' --encryption-key-file "$KEYS/node.key"
chmod 600 "$KEYS/node.key"
refused e3 'id=STORAGE-KEY .*no encryption key file'
refused e4 'id=STORAGE-KEY .*wrong master key' --encryption-key-file "$KEYS/k2"

log "3. rotation"
node e5 --encryption-key-file "$KEYS/node.key"
wait_dgnode e5
cp "$KEYS/k2" "$KEYS/node.key"
ctl e5 encryption rotate
expect_rc 0 "dgctl encryption rotate"
check "the rotation is reported with the new key's id" out_has 'data keys re-wrapped under key [0-9a-f]{16}'
stop_node e5
refused e6 'id=STORAGE-KEY .*wrong master key' --encryption-key-file "$KEYS/k1"
node e7 --encryption-key-file "$KEYS/node.key"
wait_dgnode e7
client verify1 60000 --seed "${URL[e7]}" "${CLIENT_ARGS[@]}" verify --count "$N" --round 1
check "after rotation and restart every key reads back (exit $CLIENT_RC)" test "$CLIENT_RC" = 0
stop_all_checked
finish
