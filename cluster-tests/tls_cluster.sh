#!/usr/bin/env bash
# tls_cluster: mutual TLS.  The openssl CLI makes, in the temp dir, a CA
# (EC P-256, basicConstraints CA:TRUE) and node certificates it signs (CN and
# subjectAltName "datagrid": the name nodes verify each other by); each
# node's certificate and key are concatenated into one PEM.  Two nodes on
# tls+tcp://127.0.0.1:0 form a cluster.  Then two intruders, each trusting
# the cluster's CA, must not get in (never READY, exit non-zero after the
# join timeout): one with a certificate from another CA, one self-signed.
# The cluster's topology stays as it was.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

command -v openssl >/dev/null || skip "no openssl binary (apt-get install openssl)"
JT=2000
cd "$WORK"

# ca NAME: a CA certificate NAME.pem with its key NAME.key
ca() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=datagrid test $1" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$1.log"
}
# node_cert NAME CA: NAME.pem = certificate signed by CA + private key
node_cert() {
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$1.key" -out "$1.csr" -subj "/CN=datagrid" 2>"$1.log"
	printf '%s\n' "basicConstraints=CA:FALSE" "subjectAltName=DNS:datagrid" \
		"keyUsage=critical,digitalSignature" \
		"extendedKeyUsage=serverAuth,clientAuth" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
		-days 2 -extfile "$1.ext" -out "$1.crt" 2>>"$1.log"
	cat "$1.crt" "$1.key" >"$1.pem"
	chmod 600 "$1.key" "$1.pem"
}
ca ca
ca otherca
node_cert n1 ca
node_cert n2 ca
node_cert x1 otherca
# x2: self-signed, otherwise like a node certificate
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-keyout x2.key -out x2.crt -days 2 -subj "/CN=datagrid" \
	-addext "subjectAltName=DNS:datagrid" 2>x2.log
cat x2.crt x2.key >x2.pem
check "n1, n2 certificates verify against the CA" \
	eval "openssl verify -CAfile ca.pem n1.crt n2.crt >/dev/null"
check "x1's certificate does not verify against the cluster's CA" \
	eval "! openssl verify -CAfile ca.pem x1.crt >/dev/null 2>&1"
log "certificates made: CA, n1, n2 (signed by the CA), x1 (other CA), x2 (self-signed)"

TLS=(--listen tls+tcp://127.0.0.1:0 --tls-ca "$WORK/ca.pem")
start_node n1 "${TLS[@]}" --tls-cert "$WORK/n1.pem"
wait_ready n1
check "n1 listens on tls+tcp://" eval "[[ ${ADDR[n1]} == tls+tcp://127.0.0.1:* ]]"
start_node n2 "${TLS[@]}" --tls-cert "$WORK/n2.pem" --seed "${ADDR[n1]}"
wait_ready n2
wait_until 10000 "n1, n2 agree on a 2-node topology over TLS" agree_count 2 n1 n2
V0=$AGREED_V N0=$AGREED_N C1=$(topo_count n1) C2=$(topo_count n2)
log "TLS cluster up: version=$V0 nodes=$N0"
check "n1 and n2 are the two nodes" \
	eval "[[ $N0 == ${ID[n1]},${ID[n2]} ]]"

# intruder NAME: must not get in.
intruder() {
	local name=$1
	start_node "$name" "${TLS[@]}" --tls-cert "$WORK/$name.pem" --join-timeout $JT \
		--seed "${ADDR[n1]}" --seed "${ADDR[n2]}"
	wait_until $((JT + 8000)) "$name to exit or print READY" \
		eval "has_line $name '^READY ' || ! alive $name"
	if has_line "$name" '^READY '; then
		check "$name never prints READY (it printed: $(grep -m1 '^READY ' "$WORK/$name.out"); $(grep '^TOPOLOGY ' "$WORK/$name.out" | tail -n 1))" false
		stop_node "$name"
	else
		wait_exit "$name" 2000
		check "$name never prints READY" true
		check "$name exits non-zero (got ${RC[$name]})" test "${RC[$name]}" -ne 0
	fi
}
log "intruder x1: certificate signed by another CA"
intruder x1
log "intruder x2: self-signed certificate"
intruder x2

check "the cluster's topology is unchanged (version=$V0 nodes=$N0)" agree "$N0" n1 n2
check "n1, n2 installed no new version meanwhile" \
	test "$(topo_count n1) $(topo_count n2)" = "$C1 $C2"
stop_all_checked
finish
