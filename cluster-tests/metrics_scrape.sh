#!/usr/bin/env bash
# metrics_scrape: GET /metrics (Prometheus text) of two dgnodes, fetched
# with bash's /dev/tcp (no curl), parsed and checked against a known
# exchange:
#  1. 2 dgnodes, cache scr (PARTITIONED, backups=1, FULL_SYNC, ATOMIC);
#  2. both scrapes: HTTP 200, text/plain; every non-comment line is
#     `name{labels} value` with a numeric value, its family has a TYPE line
#     before it (histogram series: name_bucket/_sum/_count), no family's
#     samples are split; histogram buckets are cumulative and +Inf = _count;
#     datagrid_topology_version = `dgctl state --json`'s topology_version;
#     datagrid_cluster_nodes 2; datagrid_node_info names the node;
#  3. N puts through `dgctl cache put` on node A, then scrape again:
#     datagrid_cache_puts_total{cache="scr"} rose by N on A and not on B;
#     the put histogram's _count rose by N on A; for every cache message
#     type the puts use (CACHE_UPDATE to B's primaries, CACHE_BACKUP to B's
#     backups, and their replies), what A sent rose by exactly what B
#     received, and the other way round.
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

FT=1000
C=scr
N=${DG_SCRAPE_PUTS:-50}
NODE_ARGS=(--failure-detection-timeout "$FT" --cache "$C,backups=1,sync=full_sync")

# scrape NAME TAG: GET /metrics from NAME's http port into
# $WORK/NAME.TAG.prom (body), the status line and headers into .hdr.
scrape() {
	local name=$1 tag=$2 raw=$WORK/$1.$2.raw
	timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		cat <&3' _ "${HPORT[$name]}" >"$raw" || die "scrape of $name failed"
	tr -d '\r' <"$raw" | sed -n '1,/^$/p' >"$WORK/$name.$tag.hdr"
	tr -d '\r' <"$raw" | sed '1,/^$/d' >"$WORK/$name.$tag.prom"
	[[ ${SCRAPE_QUIET:-0} == 1 ]] ||
		log "scraped $name ($tag): $(head -n 1 "$WORK/$name.$tag.hdr"), $(wc -l <"$WORK/$name.$tag.prom") lines"
}

# cache_counters NAME TAG: NAME's cache message counters in that scrape.
cache_counters() { grep -E '^datagrid_messages_(sent|received)_total\{type="CACHE_' "$WORK/$1.$2.prom" || true; }

# quiet: scrapes a and b ("before") until two scrapes in a row show the
# same cache message counters on both: no cache message is on its way
# between them (a joining node's CACHE_CONFIGS, a backup's late copy), so
# what the puts below send is all the difference.
quiet() {
	local n same=1
	for n in a b; do
		SCRAPE_QUIET=1 scrape "$n" again
		[[ $(cache_counters "$n" before) == "$(cache_counters "$n" again)" ]] || same=0
		mv "$WORK/$n.again.prom" "$WORK/$n.before.prom"
		mv "$WORK/$n.again.hdr" "$WORK/$n.before.hdr"
	done
	((same))
}

# well_formed FILE: the exposition format's rules (see the top comment);
# prints the offending lines.
well_formed() {
	awk '
	function fail(why) { print FILENAME ":" NR ": " why ": " $0; bad = 1 }
	/^# HELP / { next }
	/^# TYPE / {
		if (NF != 4 || $4 !~ /^(counter|gauge|histogram|summary|untyped)$/) fail("bad TYPE line")
		if ($3 in type) fail("second TYPE line for " $3)
		type[$3] = $4; next
	}
	/^#/ { next }
	/^$/ { fail("empty line"); next }
	{
		if (!match($0, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*)?\})? /)) {
			fail("not name{labels} value"); next
		}
		v = substr($0, RLENGTH + 1)
		if (v !~ /^-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$/ && v !~ /^([-+]Inf|NaN)$/)
			fail("value not a number")
		name = $0; sub(/[{ ].*/, "", name)
		fam = name
		if (!(fam in type)) { f = fam; sub(/_(bucket|sum|count)$/, "", f); if ((f in type) && type[f] == "histogram") fam = f }
		if (!(fam in type)) fail("no TYPE line for " fam)
		if (fam != last && (fam in seen)) fail("samples of " fam " not together")
		seen[fam] = 1; last = fam; samples++
	}
	END { if (samples == 0) { print FILENAME ": no samples"; bad = 1 } exit bad }
	' "$1"
}

# sample FILE SERIES: the value of the line "SERIES value" (exact series,
# labels as the node writes them), empty when absent.
sample() { awk -v s="$2" 'index($0, s " ") == 1 && length($0) > length(s) + 1 { print substr($0, length(s) + 2); exit }' "$1"; }

# buckets_ok FILE CACHE OP: the histogram's buckets never decrease and the
# +Inf bucket equals _count.
buckets_ok() {
	local f=$1 pre="datagrid_cache_op_duration_seconds"
	local lab="cache=\"$2\",op=\"$3\""
	awk -v p="${pre}_bucket{$lab,le=" '
		index($0, p) == 1 { if ($2 + 0 < prev) bad = 1; prev = $2 + 0; n++; last = $0 }
		END { exit (bad || n < 2 || last !~ /le="\+Inf"}/) }' "$f" || return 1
	[[ $(sample "$f" "${pre}_bucket{$lab,le=\"+Inf\"}") == "$(sample "$f" "${pre}_count{$lab}")" ]]
}

log "1. two servers"
start_admin_node a "${NODE_ARGS[@]}"
wait_admin_node a
start_admin_node b "${NODE_ARGS[@]}" --seed "${URL[a]}"
wait_admin_node b
wait_until 10000 "a, b agree on 2 nodes" agree_nodes 2 a b
# b just joined: its partitions are moving, and a backup copy sent while b
# is not ready is sent again — counted twice.  Settle first.
wait_active a 2

log "2. scrape both, check the format"
for n in a b; do
	scrape "$n" before
done
wait_until 10000 "no cache message in flight between two scrapes" quiet
for n in a b; do
	check "$n: HTTP 200" grep -q -E '^HTTP/1\.[01] 200 ' "$WORK/$n.before.hdr"
	check "$n: Content-Type text/plain; version=0.0.4" \
		grep -q -i -E '^content-type: text/plain; version=0\.0\.4' "$WORK/$n.before.hdr"
	check "$n: every sample is name{labels} number with a TYPE line, families together" \
		well_formed "$WORK/$n.before.prom"
	check "$n: the put histogram's buckets are cumulative, +Inf = _count" \
		buckets_ok "$WORK/$n.before.prom" "$C" put
	check "$n: datagrid_node_info names ${ID[$n]} at ${URL[$n]}" \
		test "$(sample "$WORK/$n.before.prom" "datagrid_node_info{node=\"${ID[$n]}\",address=\"${URL[$n]}\",version=\"$(grep -o -m1 'version="[^"]*"' "$WORK/$n.before.prom" | cut -d'"' -f2)\"}")" = 1
	check "$n: datagrid_cluster_nodes 2" test "$(sample "$WORK/$n.before.prom" datagrid_cluster_nodes)" = 2
	ctl "$n" state --json
	tv=$(jq -r .topology_version <<<"$OUT")
	check "$n: datagrid_topology_version = dgctl state's topology_version ($tv)" \
		test "$(sample "$WORK/$n.before.prom" datagrid_topology_version)" = "$tv"
done
# the checker must reject what is wrong (a self-test of well_formed)
printf '# TYPE x counter\nx 1\ny 2\n' >"$WORK/bad1.prom"
printf '# TYPE x counter\nx{a="1"} one\n' >"$WORK/bad2.prom"
printf '# TYPE x counter\nx 1\n# TYPE y gauge\ny 1\nx{a="b"} 2\n' >"$WORK/bad3.prom"
for f in bad1 bad2 bad3; do
	check "well_formed rejects $f.prom" eval '! well_formed "$WORK/$f.prom" >/dev/null'
done

log "3. $N puts through dgctl on a"
for ((i = 0; i < N; i++)); do
	CTL_QUIET=1 ctl a cache put "$C" "key$i" "value$i"
	[[ $CRC == 0 ]] || die "dgctl cache put key$i failed"
done
log "the $N puts were acknowledged"
for n in a b; do
	scrape "$n" after
	check "$n: the second scrape is well formed" well_formed "$WORK/$n.after.prom"
done
# delta NAME SERIES: SERIES' value after minus before on NAME (0 for absent)
delta() {
	local x y
	x=$(sample "$WORK/$1.before.prom" "$2")
	y=$(sample "$WORK/$1.after.prom" "$2")
	echo $((${y:-0} - ${x:-0}))
}
d=$(delta a "datagrid_cache_puts_total{cache=\"$C\"}")
check "a: datagrid_cache_puts_total{cache=\"$C\"} rose by $N (by $d)" test "$d" = "$N"
d=$(delta b "datagrid_cache_puts_total{cache=\"$C\"}")
check "b: datagrid_cache_puts_total{cache=\"$C\"} did not move (by $d): no put started there" test "$d" = 0
d=$(delta a "datagrid_cache_op_duration_seconds_count{cache=\"$C\",op=\"put\"}")
check "a: the put histogram's _count rose by $N (by $d)" test "$d" = "$N"
check "a: after: the put histogram's buckets are cumulative, +Inf = _count" \
	buckets_ok "$WORK/a.after.prom" "$C" put
entries=$(sample "$WORK/a.after.prom" "datagrid_cache_entries{cache=\"$C\"}")
check "a: datagrid_cache_entries{cache=\"$C\"} = $N (backups=1: a copy of every key; got $entries)" \
	test "$entries" = "$N"
# message types that moved on a because of the puts
types=$(grep -o -E '^datagrid_messages_sent_total\{type="CACHE_[A-Z_]+"\}' "$WORK/a.after.prom" |
	sed -E 's/.*type="([^"]+)".*/\1/' | sort -u)
log "cache message types a knows: $(tr '\n' ' ' <<<"$types")"
moved=0
sent_total=0
for t in $types; do
	as=$(delta a "datagrid_messages_sent_total{type=\"$t\"}")
	br=$(delta b "datagrid_messages_received_total{type=\"$t\"}")
	bs=$(delta b "datagrid_messages_sent_total{type=\"$t\"}")
	ar=$(delta a "datagrid_messages_received_total{type=\"$t\"}")
	((as + br + bs + ar == 0)) && continue
	moved=$((moved + 1))
	log "  $t: a sent +$as, b received +$br; b sent +$bs, a received +$ar"
	check "$t: a's sent rose by what b's received rose ($as = $br)" test "$as" = "$br"
	check "$t: b's sent rose by what a's received rose ($bs = $ar)" test "$bs" = "$ar"
	[[ $t == CACHE_UPDATE || $t == CACHE_BACKUP ]] && sent_total=$((sent_total + as))
done
check "the puts moved some cache message types ($moved)" test "$moved" -gt 0
check "a sent one CACHE_UPDATE (to b's primaries) or CACHE_BACKUP (to b's backups) per put ($sent_total = $N)" \
	test "$sent_total" = "$N"
d=$(delta a 'datagrid_messages_sent_total{type="CACHE_UPDATE"}')
check "some puts went to b's primaries: CACHE_UPDATE sent by a rose (by $d)" test "$d" -gt 0

stop_all_checked
finish
