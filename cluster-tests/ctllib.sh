# ctllib.sh — shared by the dgctl / admin / metrics tests (sourced, not run).
#
# A test is run by ctest as `bash <test>.sh <dgnode> <cacheclient> <dgctl>`.
# This file sources cachelib.sh (and so lib.sh: work directory, EXIT trap,
# wait_until, check / finish, dgnode and cacheclient helpers) and adds:
#   - start_admin_node NAME dgnode-args...: a dgnode on free ports for its
#     cluster, admin (--admin-listen) and http (--http-listen) endpoints,
#     all given explicitly so that nothing collides (PORT_OF, APORT, HPORT);
#   - wait_admin_node NAME: wait_dgnode, and the admin= and http= URLs its
#     NODE-READY line printed (READY_ADMIN, READY_HTTP);
#   - start_three ARGS...: servers n1, n2, n3 up, agreeing and rebalanced;
#   - wait_active NODE SERVERS [TIMEOUT_MS]: `dgctl state` at NODE says
#     ACTIVE (nothing moving, every node's caches at NODE's topology
#     version) with SERVERS servers;
#   - ctl NODE dgctl-args... / ctl_port PORT ... / ctl_raw ...: one dgctl
#     run, bounded by `timeout`; CRC (exit status), OUT, ERR, CTL_MS;
#   - jout [jq-args...] FILTER: jq -e over OUT (the last dgctl's stdout);
#   - expect_rc WANT WHAT: a check that the last dgctl exited WANT;
#   - make_tls_files DIR: DEPLOY.md's openssl commands — ca.pem (and
#     other.pem, a CA that signed nothing here), node.pem and dgctl.pem
#     (certificate + key naming datagrid) and a secret, all mode 0600.
# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are read by the test scripts
# shellcheck source=cachelib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cachelib.sh"

DGCTL=${3:?usage: $0 /path/to/dgnode /path/to/cacheclient /path/to/dgctl}
[[ -x $DGCTL ]] || die "dgctl not executable: $DGCTL"
command -v jq >/dev/null || skip "no jq (apt-get install jq)"
command -v timeout >/dev/null || skip "no timeout (coreutils)"
declare -A PORT_OF=() APORT=() HPORT=() READY_ADMIN=() READY_HTTP=()

# start_admin_node NAME dgnode-args...
start_admin_node() {
	local name=$1
	shift
	free_port
	PORT_OF[$name]=$PORT
	free_port
	APORT[$name]=$PORT
	free_port
	HPORT[$name]=$PORT
	start_dgnode "$name" "${PORT_OF[$name]}" \
		--admin-listen "tcp://127.0.0.1:${APORT[$name]}" \
		--http-listen "http://127.0.0.1:${HPORT[$name]}" "$@"
}

# start_three ARGS...: servers n1, n2, n3 (n2 and n3 seeded by n1) started
# with ARGS, ready, agreeing on one 3-node topology (AGREED_V), and done
# rebalancing onto it (state ACTIVE): nodes that just joined are still
# MOVING partitions, and a check of the state would race with them.
start_three() {
	start_admin_node n1 "$@"
	wait_admin_node n1
	start_admin_node n2 "$@" --seed "${URL[n1]}"
	start_admin_node n3 "$@" --seed "${URL[n1]}"
	wait_admin_node n2
	wait_admin_node n3
	wait_until 10000 "n1, n2, n3 agree on 3 nodes" agree_nodes 3 n1 n2 n3
	local v=$AGREED_V
	wait_active n1 3 30000
	log "n1, n2, n3: ACTIVE $WAITED_MS ms after they agreed on version $v"
	AGREED_V=$v
}

# cluster_active NODE SERVERS: the last `dgctl state --json` at NODE says
# ACTIVE, SERVERS servers, every node answered.
cluster_active() {
	CTL_QUIET=1 ctl "$1" state --json &&
		jout --argjson s "$2" '.state == "ACTIVE" and .servers == $s and .nodes_unanswered == 0'
}

# wait_active NODE SERVERS [TIMEOUT_MS]: polls cluster_active (20 s).
wait_active() {
	wait_until "${3:-20000}" "$1 says ACTIVE with $2 servers" cluster_active "$1" "$2"
}

# wait_admin_node NAME [TIMEOUT_MS]
wait_admin_node() {
	local name=$1 line
	wait_dgnode "$@"
	line=$(grep -m1 ' id=NODE-READY ' "$WORK/$name.err")
	[[ $line =~ \ admin=([^ ]+)\ http=([^ ]+) ]] || die "$name: no admin=/http= in: $line"
	READY_ADMIN[$name]=${BASH_REMATCH[1]}
	READY_HTTP[$name]=${BASH_REMATCH[2]}
}

# ctl_raw dgctl-args...: runs dgctl (at most CTL_LIMIT_S seconds, default
# 30); CRC, OUT, ERR, CTL_MS.  Never fails (set -e).  Logs the command and
# its outcome (CTL_QUIET=1: only when it failed).
CTL_N=0
ctl_raw() {
	local t0
	CTL_N=$((CTL_N + 1))
	now_ms
	t0=$NOW
	CRC=0
	timeout -k 2 "${CTL_LIMIT_S:-30}" "$DGCTL" "$@" >"$WORK/ctl$CTL_N.out" \
		2>"$WORK/ctl$CTL_N.err" </dev/null || CRC=$?
	now_ms
	CTL_MS=$((NOW - t0))
	OUT=$(<"$WORK/ctl$CTL_N.out")
	ERR=$(<"$WORK/ctl$CTL_N.err")
	[[ ${CTL_QUIET:-0} == 1 && $CRC == 0 ]] ||
		log "dgctl $* -> exit $CRC, ${CTL_MS} ms${ERR:+, stderr: ${ERR//$'\n'/ | }}"
}

# ctl_port PORT dgctl-args...: dgctl against the admin endpoint on PORT.
ctl_port() {
	local port=$1
	shift
	ctl_raw --port "$port" "$@"
}

# ctl NODE dgctl-args...: dgctl against NODE's admin endpoint.
ctl() {
	local name=$1
	shift
	ctl_port "${APORT[$name]}" "$@"
}

# jout [jq-args...] FILTER: jq -e over the last dgctl's stdout (the filter last).
jout() { jq -e "$@" >/dev/null 2>&1 <<<"$OUT"; }

# expect_rc WANT WHAT: checks the last dgctl's exit status.
expect_rc() { check "$2 (exit $CRC, want $1)" test "$CRC" = "$1"; }

# out_has ERE / err_has ERE: the last dgctl's stdout / stderr has a match.
out_has() { grep -q -E -- "$1" <<<"$OUT"; }
err_has() { grep -q -E -- "$1" <<<"$ERR"; }

# make_tls_files DIR: node/DEPLOY.md's commands: a CA, then certificates
# naming datagrid (dies when openssl fails).
make_tls_files() {
	mkdir -p "$1"
	(
		cd "$1"
		for ca in ca other; do
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout $ca.key -out $ca.pem -days 3650 -subj "/CN=datagrid CA $ca" \
				-addext "basicConstraints=critical,CA:TRUE" \
				-addext "keyUsage=critical,keyCertSign,cRLSign"
		done
		printf '%s\n' "basicConstraints=CA:FALSE" "subjectAltName=DNS:datagrid" \
			"keyUsage=critical,digitalSignature" \
			"extendedKeyUsage=serverAuth,clientAuth" >datagrid-cert.ext
		for who in node dgctl; do
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout $who.key -out $who.csr -subj "/CN=datagrid"
			openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
				-days 825 -extfile datagrid-cert.ext -out $who.crt
			cat $who.crt $who.key >$who.pem
		done
		printf 'tls-test-secret\n' >secret
		chmod 600 ./*.key ./*.pem secret
	) >"$1.log" 2>&1 || die "openssl failed: $(tail -n 3 "$1.log")"
}
