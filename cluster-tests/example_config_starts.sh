#!/usr/bin/env bash
# example_config_starts: node/dgnode.conf.example, as shipped, is a config
# dgnode reads and starts with.  One dgnode runs with --config on the
# example and only the host-specific settings overridden by flags (listen on
# 127.0.0.1, no seeds, the secret file and data dir in the temp dir); at
# log-level debug it logs every setting, and every other value must be the
# example's (so each line of the file parsed and took effect).  Both caches
# are created, a client writes and reads keys of `accounts` with the
# secret, and SIGTERM stops the node with exit 0.  Then the example's
# commented TLS lines, uncommented, with certificates made by the openssl
# commands of node/DEPLOY.md: a TLS node starts on them (without the
# openssl binary that part is skipped).
set -euo pipefail
source "$(dirname "$0")/cachelib.sh"

EXAMPLE=$(cd "$(dirname "$0")/.." && pwd)/node/dgnode.conf.example
[[ -r $EXAMPLE ]] || die "no example config at $EXAMPLE"

# A port with port + 100 and port + 200 free too (the auto admin and http
# endpoints).
while :; do
	free_port
	port_in_use $((PORT + 100)) || port_in_use $((PORT + 200)) || break
done
printf 'example-config-test-secret\n' >"$WORK/secret"
chmod 600 "$WORK/secret"
mkdir "$WORK/data"

start_dgnode n1 "$PORT" --config "$EXAMPLE" --seed= --secret-file "$WORK/secret" \
	--data-dir "$WORK/data" --log-level debug
wait_dgnode n1

# setting NAME VALUE: n1 logged `id=SETTING name=NAME value=VALUE`.
setting() { has_log n1 " id=SETTING name=$1 value=$(printf '%s' "$2" | sed 's/[.[\*^$]/\\&/g')\$"; }
check "cluster-name from the file" setting cluster-name datagrid
check "admin-listen from the file" setting admin-listen auto
check "http-listen from the file" setting http-listen auto
check "storage-map-size from the file" setting storage-map-size 8g
check "storage-sync from the file" setting storage-sync true
check "failure-detection-timeout from the file" setting failure-detection-timeout 10000
check "join-timeout from the file" setting join-timeout 30000
check "request-timeout from the file" setting request-timeout 10000
check "log-level from the flag" setting log-level debug
check "no seeds (the flag --seed= cleared the file's three)" setting seed '""'
check "listen from the flag" setting listen "tcp://127.0.0.1:$PORT"
check "both caches of the file" has_log n1 \
	' id=SETTING name=cache value="accounts,backups=2,sync=full_sync,atomicity=transactional,persistence=true; sessions,backups=1,sync=primary_sync,ttl=30m"$'
check "cache accounts created" has_log n1 ' id=CACHE-READY cache=accounts$'
check "cache sessions created" has_log n1 ' id=CACHE-READY cache=sessions$'
check "NODE-READY says 2 caches" has_log n1 ' id=NODE-READY .* caches=2( |$)'

client put1 20000 --seed "${URL[n1]}" --cache accounts --secret-file "$WORK/secret" \
	put --count 100 --round 1
check "put1: 100 keys into accounts with the secret" test "$CLIENT_RC" = 0
client verify1 20000 --seed "${URL[n1]}" --cache accounts --secret-file "$WORK/secret" \
	verify --count 100 --round 1
check "verify1: 100 keys read back" test "$CLIENT_RC" = 0
check "the data dir holds LMDB files" eval "[[ -n \$(ls -A '$WORK/data') ]]"

stop_all_checked

# The commented TLS lines of the example, uncommented, with certificates
# made by node/DEPLOY.md's openssl commands: a node starts on them.
command -v openssl >/dev/null || { log "no openssl binary: TLS part skipped"; finish; }
mkdir "$WORK/tls"
(
	cd "$WORK/tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout ca.key -out ca.pem -days 3650 -subj "/CN=datagrid CA" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign"
	printf '%s\n' "basicConstraints=CA:FALSE" "subjectAltName=DNS:datagrid" \
		"keyUsage=critical,digitalSignature" \
		"extendedKeyUsage=serverAuth,clientAuth" >datagrid-cert.ext
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout node.key -out node.csr -subj "/CN=datagrid"
	openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
		-days 825 -extfile datagrid-cert.ext -out node.crt
	cat node.crt node.key >node.pem
	chmod 600 node.key node.pem
) >"$WORK/tls.log" 2>&1 || die "openssl failed: $(tail -n 3 "$WORK/tls.log")"
sed -e 's/^#\(listen = tls+tcp:\)/\1/' -e 's/^#\(tls-[a-z-]* = \)/\1/' \
	-e "s#/etc/datagrid/tls/#$WORK/tls/#" "$EXAMPLE" >"$WORK/tls.conf"
check "the example has three commented TLS lines" \
	test "$(diff "$EXAMPLE" "$WORK/tls.conf" | grep -c '^>')" = 3
while :; do
	free_port
	port_in_use $((PORT + 100)) || port_in_use $((PORT + 200)) || break
done
start_proc t1 "$DGNODE" --config "$WORK/tls.conf" --listen "tls+tcp://127.0.0.1:$PORT" \
	--seed= --secret-file "$WORK/secret" --data-dir "$WORK/data" --log-level debug
wait_dgnode t1
check "t1 listens with TLS" test "${ADDR[t1]}" = "tls+tcp://127.0.0.1:$PORT"
check "t1 took tls-cert-key from the file" \
	has_log t1 " id=SETTING name=tls-cert-key value=$WORK/tls/node.pem\$"
check "t1 took tls-ca from the file" \
	has_log t1 " id=SETTING name=tls-ca value=$WORK/tls/ca.pem\$"
stop_all_checked
finish
