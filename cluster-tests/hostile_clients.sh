#!/usr/bin/env bash
# hostile_clients: issue 14's hostile cases against real dgnodes, each with
# bounds that fail when the node gives in (hostile.c does the attacking):
#  1. three servers with a secret, n1 under a file limit of 200;
#  2. HELLO spam: 40,000 peer HELLOs with fresh node ids at n1 → its RSS
#     grows < 64 MiB (an ~8 KiB peer entry each grew a node to 1.1 GB),
#     a few log lines at most, dgctl answers within 3 s, 3 nodes still;
#  3. admin reopen flood: 12 threads reopening sockets to n1's admin port
#     for 6 s → every dgctl meanwhile exits 0 within 3 s;
#  4. idle flood under the file limit: 400 idle sockets on n1's HTTP port
#     and 300 on its cluster port for 8 s (more than its 200 descriptors)
#     → n1 uses < 50% of a core meanwhile (accept failures back off),
#     /metrics and dgctl answer after, the HTTP sockets beyond the cap
#     were closed, and the cluster still has its 3 nodes, one CLUSTER-FORMED;
#  5. a TLS node (peers, admin and https /metrics, a bearer token): its
#     NODE-OPEN line says so; 20 sockets that never start TLS on its admin
#     port do not keep dgctl out and are closed within the handshake
#     deadline; dgctl with a wrong secret ×20 fails (1) within its timeout
#     and says why (it hung in 8 of 20 tries); https /metrics, the
#     dashboard / and /api/state: 401 without
#     the token, 200 with it;
#  6. without a secret a node refuses a non-loopback address (unless
#     --insecure, then NODE-OPEN says insecure=true).
#   bash hostile_clients.sh DGNODE CACHECLIENT DGCTL HOSTILE
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"
HOSTILE=${4:?usage: $0 DGNODE CACHECLIENT DGCTL HOSTILE}
[[ -x $HOSTILE ]] || die "hostile not executable: $HOSTILE"

FT=1000
export DG_CLUSTER_SECRET=hostile-test-secret-$RANDOM$RANDOM
NODE_ARGS=(--failure-detection-timeout "$FT" --cache "kv,backups=1")
CLK_TCK=$(getconf CLK_TCK)

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/${PID[$1]}/status"; }
cpu_ticks() { # utime + stime of NAME's process
	local st
	read -r st <"/proc/${PID[$1]}/stat"
	st=${st##*) }
	read -r -a f <<<"$st"
	echo $((f[11] + f[12]))
}
# thread_ticks NAME: "tid comm ticks" for each live thread of NAME's process
thread_ticks() {
	local t st f
	for t in /proc/"${PID[$1]}"/task/*; do
		read -r st <"$t/stat" 2>/dev/null || continue
		local head=${st%%) *} rest=${st##*) }
		read -r -a f <<<"$rest"
		echo "${t##*/} ${head#*(} $((f[11] + f[12]))"
	done
}
# busiest_threads BEFORE AFTER: the threads that used the most ticks between
# two thread_ticks snapshots (a thread born in between counts from 0)
busiest_threads() {
	awk 'NR == FNR { t0[$1] = $3; next }
	     { d = $3 - t0[$1]; sum += d; if (d > 0) printf "%d %s/%s\n", d, $2, $1 }
	     END { printf "%d (live threads in all)\n", sum }' "$1" "$2" | sort -rn | head -6 | tr '\n' ';'
}
# ctl_quick NAME WHAT [dgctl-args]: `dgctl state` at NAME exits 0 within 3 s
ctl_quick() {
	local name=$1 what=$2
	shift 2
	CTL_LIMIT_S=10 ctl "$name" --timeout 3s "${@:-state}"
	check "$what: dgctl at $name exits 0 (exit $CRC) within 3000 ms ($CTL_MS ms)" \
		eval 'test "$CRC" = 0 && test "$CTL_MS" -lt 3000'
}
# scrape_status NAME: the status code of GET /metrics at NAME (0: none)
scrape_status() {
	local line
	line=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET /metrics HTTP/1.0\r\n\r\n" >&3
		head -n 1 <&3' _ "${HPORT[$1]}" 2>/dev/null) || true
	[[ $line =~ ^HTTP/1\.[01]\ ([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 0
}
log_lines() { grep -c -E "$2" "$WORK/$1.err" || true; }

log "1. three servers with a secret; n1 with a file limit of 200"
cat >"$WORK/lowfd" <<EOF
#!/usr/bin/env bash
ulimit -n 200
exec "$DGNODE" "\$@"
EOF
chmod +x "$WORK/lowfd"
REAL_DGNODE=$DGNODE
DGNODE=$WORK/lowfd start_admin_node n1 "${NODE_ARGS[@]}"
wait_admin_node n1
start_admin_node n2 "${NODE_ARGS[@]}" --seed "${URL[n1]}"
start_admin_node n3 "${NODE_ARGS[@]}" --seed "${URL[n1]}"
wait_admin_node n2
wait_admin_node n3
wait_until 15000 "n1, n2, n3 agree on 3 nodes" agree_nodes 3 n1 n2 n3
wait_active n1 3 30000
check "n1 runs with 200 file descriptors" \
	grep -q -E '^Max open files +200 ' "/proc/${PID[n1]}/limits"

log "2. HELLO spam"
RSS0=$(rss_kb n1)
HS0=$(log_lines n1 'id=HANDSHAKE')
"$HOSTILE" hello "${PORT_OF[n1]}" 40000 8 >"$WORK/hello.out"
log "$(cat "$WORK/hello.out")"
RSS1=$(rss_kb n1)
log "n1 RSS: $RSS0 kB before, $RSS1 kB after"
# under ASan freed memory stays resident in its quarantine (256 MiB by
# default): the CMake file raises the bound for sanitized builds
RSS_MAX_KB=${DG_HOSTILE_RSS_KB:-65536}
check "HELLO spam: n1's RSS grew < $RSS_MAX_KB kB ($((RSS1 - RSS0)) kB)" \
	test $((RSS1 - RSS0)) -lt "$RSS_MAX_KB"
check "HELLO spam: at most 30 HANDSHAKE log lines ($(($(log_lines n1 'id=HANDSHAKE') - HS0)))" \
	test $(($(log_lines n1 'id=HANDSHAKE') - HS0)) -le 30
ctl_quick n1 "after the HELLO spam"
check "after the HELLO spam: 3 nodes" agree_nodes 3 n1 n2 n3

log "3. admin reopen flood"
AB0=$(log_lines n1 'id=ADMIN-')
"$HOSTILE" reopen "${APORT[n1]}" 12 6000 >"$WORK/reopen.out" &
FLOOD=$!
sleep 0.5
for i in 1 2 3 4 5; do
	ctl_quick n1 "during the admin reopen flood ($i)"
	sleep 0.3
done
wait "$FLOOD"
log "$(cat "$WORK/reopen.out")"
check "admin reopen flood: at most 30 ADMIN- log lines ($(($(log_lines n1 'id=ADMIN-') - AB0)))" \
	test $(($(log_lines n1 'id=ADMIN-') - AB0)) -le 30

log "4. idle flood past the file limit (HTTP and cluster ports)"
# What n1 still does for the floods before (the reopen flood's connections
# left in its listen queue, each accepted, handshaken and closed) is not the
# idle flood's: wait (bounded) until n1 is near idle, so that the CPU
# measured below is the idle flood's.  A CI run once measured 57% here.
SETTLE_T0=$(date +%s%N)
while :; do
	S0=$(cpu_ticks n1)
	sleep 0.5
	S1=$(cpu_ticks n1)
	SETTLE_MS=$((($(date +%s%N) - SETTLE_T0) / 1000000))
	if (((S1 - S0) * 1000 / CLK_TCK < 50)); then
		log "n1 near idle before the idle flood ($((S1 - S0)) ticks in the last 0.5 s, after $SETTLE_MS ms)"
		break
	fi
	((SETTLE_MS < 15000)) || die "n1 still busy 15 s after the reopen flood ($((S1 - S0)) ticks in 0.5 s)"
done
now_ms
FLOOD_T0=$NOW
declare -A ACC0=()
for id in ACCEPT-FAIL HTTP-ACCEPT-FAIL; do ACC0[$id]=$(log_lines n1 " id=$id "); done
"$HOSTILE" idle "${HPORT[n1]}" 400 8000 >"$WORK/idle-http.out" &
F1=$!
"$HOSTILE" idle "${PORT_OF[n1]}" 300 8000 >"$WORK/idle-tp.out" &
F2=$!
sleep 1.5
thread_ticks n1 >"$WORK/ticks0"
C0=$(cpu_ticks n1)
L0=$(wc -l <"$WORK/n1.err")
now_ms
T1=$NOW
sleep 5
C1=$(cpu_ticks n1)
thread_ticks n1 >"$WORK/ticks1"
now_ms
PCT=$(((C1 - C0) * 100000 / CLK_TCK / (NOW - T1)))
log "n1 used $PCT% of a core during the flood ($((C1 - C0)) ticks in $((NOW - T1)) ms)"
log "n1's busiest threads meanwhile (ticks comm/tid): $(busiest_threads "$WORK/ticks0" "$WORK/ticks1")"
log "n1's log lines meanwhile, by id: $(tail -n +$((L0 + 1)) "$WORK/n1.err" | grep -o ' id=[A-Z0-9-]*' | sort | uniq -c | sort -rn | head -8 | tr -s ' \n' ' ')"
check "idle flood: n1 below 50% of a core (accept failures back off)" test "$PCT" -lt 50
wait "$F1" "$F2"
now_ms
FLOOD_S=$(((NOW - FLOOD_T0) / 1000 + 1))
log "HTTP: $(cat "$WORK/idle-http.out"); cluster port: $(cat "$WORK/idle-tp.out")"
[[ $(cat "$WORK/idle-http.out") =~ opened=([0-9]+)\ refused=[0-9]+\ closed_by_node=([0-9]+) ]] ||
	die "bad hostile idle output"
check "idle flood: HTTP sockets past the cap of 64 closed by n1 (${BASH_REMATCH[2]} of ${BASH_REMATCH[1]})" \
	test "${BASH_REMATCH[2]}" -ge $((BASH_REMATCH[1] - 64))
wait_until 10000 "/metrics at n1 answers 200 after the flood" eval '[[ $(scrape_status n1) == 200 ]]'
ctl_quick n1 "after the idle flood"
check "after the idle flood: 3 nodes" agree_nodes 3 n1 n2 n3
check "one CLUSTER-FORMED among the three logs" \
	test "$(cat "$WORK"/n[123].err | grep -c ' id=CLUSTER-FORMED ')" = 1
for id in ACCEPT-FAIL HTTP-ACCEPT-FAIL; do
	N=$(($(log_lines n1 " id=$id ") - ACC0[$id]))
	check "$id logged at most once a second ($N lines in $FLOOD_S s)" test "$N" -le $((FLOOD_S + 1))
done
stop_all_checked

log "5. a TLS node"
command -v openssl >/dev/null || { log "no openssl binary: TLS part skipped"; finish; }
make_tls_files "$WORK/tls"
printf 'bearer-%s\n' "$RANDOM$RANDOM" >"$WORK/tls/token"
TOKEN=$(<"$WORK/tls/token")
free_port
TP=$PORT
free_port
TA=$PORT
free_port
TH=$PORT
start_proc t1 "$REAL_DGNODE" --listen "tls+tcp://127.0.0.1:$TP" \
	--admin-listen "tls+tcp://127.0.0.1:$TA" --http-listen "https://127.0.0.1:$TH" \
	--tls-cert-key "$WORK/tls/node.pem" --tls-ca "$WORK/tls/ca.pem" \
	--http-bearer-token-file "$WORK/tls/token"
wait_dgnode t1
check "t1's NODE-OPEN line: TLS and auth everywhere" grep -q -E \
	"id=NODE-OPEN peers=tls\+tcp://127\.0\.0\.1:$TP peers_auth=secret peers_tls=on admin=tls\+tcp://127\.0\.0\.1:$TA admin_auth=secret admin_tls=on http=https://127\.0\.0\.1:$TH http_auth=bearer http_tls=on$" \
	"$WORK/t1.err"
TLS_ARGS=(--url "tls+tcp://127.0.0.1:$TA" --tls-ca "$WORK/tls/ca.pem"
	--tls-cert-key "$WORK/tls/dgctl.pem")
"$HOSTILE" idle "$TA" 20 4500 >"$WORK/idle-tls.out" &
F1=$!
sleep 0.5
CTL_LIMIT_S=10 ctl_raw --timeout 3s "${TLS_ARGS[@]}" state
check "dgctl over TLS past 20 silent sockets: exit 0 (exit $CRC) within 3000 ms ($CTL_MS ms)" \
	eval 'test "$CRC" = 0 && test "$CTL_MS" -lt 3000'
wait "$F1"
log "$(cat "$WORK/idle-tls.out")"
[[ $(cat "$WORK/idle-tls.out") =~ opened=([0-9]+)\ refused=[0-9]+\ closed_by_node=([0-9]+) ]] ||
	die "bad hostile idle output"
check "silent sockets on the TLS admin port closed within the handshake deadline (${BASH_REMATCH[2]} of ${BASH_REMATCH[1]})" \
	test "${BASH_REMATCH[2]}" = "${BASH_REMATCH[1]}"

SLOW=0 WRONG_MSG=0
for i in $(seq 20); do
	CTL_QUIET=1 CTL_LIMIT_S=20 DG_CLUSTER_SECRET=not-the-secret \
		ctl_raw --timeout 2s "${TLS_ARGS[@]}" state
	[[ $CRC == 1 && $CTL_MS -lt 3500 ]] || { SLOW=$((SLOW + 1)); log "try $i: exit $CRC after $CTL_MS ms: $ERR"; }
	err_has 'authentication failed' || WRONG_MSG=$((WRONG_MSG + 1))
done
check "wrong secret over TLS ×20: every dgctl exits 1 within 3.5 s ($SLOW did not)" test "$SLOW" = 0
check "wrong secret over TLS ×20: every one says 'authentication failed' ($WRONG_MSG did not)" \
	test "$WRONG_MSG" = 0

# https_get PATH [HEADER]: status code of GET PATH over TLS at t1
https_get() {
	local req="GET $1 HTTP/1.0\r\n${2:+$2\r\n}\r\n" line
	printf "$req" | timeout 10 openssl s_client -quiet -connect "127.0.0.1:$TH" \
		-CAfile "$WORK/tls/ca.pem" -servername datagrid >"$WORK/https.out" 2>/dev/null || true
	line=$(head -n 1 "$WORK/https.out")
	[[ $line =~ ^HTTP/1\.1\ ([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 0
}
check "https /metrics without the token: 401" test "$(https_get /metrics)" = 401
check "https /metrics with the token: 200" \
	test "$(https_get /metrics "Authorization: Bearer $TOKEN")" = 200
check "https /metrics with the token: the metrics" grep -q '^datagrid_' "$WORK/https.out"
# the dashboard and its answers: the same TLS and the same token
check "https / (the dashboard) without the token: 401" test "$(https_get /)" = 401
check "https / with the token: 200" test "$(https_get / "Authorization: Bearer $TOKEN")" = 200
check "https / with the token: the page" grep -q '<script src="/dashboard.js"' "$WORK/https.out"
check "https /api/state without the token: 401" test "$(https_get /api/state)" = 401
check "https /api/state with the token: 200" \
	test "$(https_get /api/state "Authorization: Bearer $TOKEN")" = 200
log "https /api/state: $(tail -n 1 "$WORK/https.out" | cut -c1-300)"
check "https /api/state with the token: the state command's answer" \
	grep -q '^{"ok":true,"result":{"cluster":"datagrid",' "$WORK/https.out"
stop_all_checked

log "6. no secret on a non-loopback address"
free_port
P6=$PORT
env -u DG_CLUSTER_SECRET timeout 10 "$REAL_DGNODE" --listen "tcp://0.0.0.0:$P6" \
	--admin-listen none --http-listen none >"$WORK/refused.out" 2>"$WORK/refused.err" && RC6=0 || RC6=$?
check "without a secret on 0.0.0.0: refused (exit $RC6)" test "$RC6" = 1
check "without a secret on 0.0.0.0: the log says how to allow it" \
	grep -q "not a loopback address and there is no cluster secret.*insecure" "$WORK/refused.err"
free_port
start_proc open env -u DG_CLUSTER_SECRET "$REAL_DGNODE" --listen "tcp://0.0.0.0:$PORT" \
	--admin-listen none --http-listen none --insecure
wait_dgnode open
check "--insecure: NODE-OPEN warns, insecure=true" \
	grep -q -E "level=warn id=NODE-OPEN .*peers_auth=none .* insecure=true$" "$WORK/open.err"
stop_all_checked
finish
