#!/usr/bin/env bash
# monitoring_files: node/monitoring/ is valid and names only what a node
# serves (node/monitoring/README.md):
#  1. promtool check rules alerts.yml; promtool test rules alerts_test.yml
#     (for each alert, series that fire it and series that must not);
#  2. grafana-dashboard.json parses (jq); every panel but a row has a
#     target with an expr; panel ids are unique; it has the datasource and
#     instance variables; every expr parses as PromQL (promtool check rules
#     over a rules file made of them, Grafana's variables replaced);
#  3. one dgnode with cache mon, a few puts and a get through dgctl, GET
#     /metrics: every datagrid_* name in alerts.yml, alerts_test.yml and the
#     dashboard is in the scrape (a histogram's name_bucket/_sum/_count: its
#     family), and every label="value" matcher on a datagrid_* series there
#     matches some sample of it (but for job, instance and cache, whose
#     values are the scraper's and the user's).  This is what fails when a metric or a
#     label value is renamed: the missing ones are printed.
# Needs promtool (Debian package prometheus) and jq, else skipped (77).
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"

MON=$(cd "$(dirname "$0")/../node/monitoring" && pwd)
ALERTS=$MON/alerts.yml
ALERTS_TEST=$MON/alerts_test.yml
DASH=$MON/grafana-dashboard.json
C=mon
N=5
command -v promtool >/dev/null || skip "no promtool (apt-get install prometheus)"

log "1. the alert rules"
check "promtool check rules alerts.yml" promtool check rules "$ALERTS"
check "promtool test rules alerts_test.yml" promtool test rules "$ALERTS_TEST"

log "2. the Grafana dashboard"
# jqe ARGS...: jq -e, its output dropped (check logs the outcome)
jqe() { jq -e "$@" >/dev/null; }
jqe . "$DASH" || die "grafana-dashboard.json does not parse (jq)"
log "ok: grafana-dashboard.json parses"
# every panel, rows' nested panels included; rows hold no queries
PANELS='[.panels[], (.panels[].panels[]?)] | map(select(.type != "row"))'
np=$(jq "$PANELS | length" "$DASH")
log "$np panels (rows left out)"
check "it has panels ($np)" test "$np" -gt 0
no_expr=$(jq -r "$PANELS | map(select([.targets[]?.expr // \"\" | select(length > 0)] | length == 0))
	| .[] | \"\\(.id) \\(.title)\"" "$DASH")
check "every panel has a target with an expr${no_expr:+ (not: ${no_expr//$'\n'/, })}" test -z "$no_expr"
check "panel ids are unique" jqe '[.panels[], (.panels[].panels[]?)] | map(.id) | length == (unique | length)' "$DASH"
check "a datasource variable and an instance variable" \
	jqe '[.templating.list[].name] | index("datasource") and index("instance")' "$DASH"
check "schemaVersion set" jqe '.schemaVersion >= 36' "$DASH"
# The exprs as recording rules: promtool parses each (and says which
# failed).  Grafana's $__rate_interval and $var / ${var} become PromQL.
# shellcheck disable=SC2016  # these $ are sed's and Grafana's
unvar='s/\$__rate_interval/5m/g; s/\$\{?[A-Za-z_]+\}?/.*/g'
jq -r "$PANELS | [.[].targets[]?.expr | select(. != null)] | to_entries[]
	| \"      - record: dashboard:expr_\\(.key)\\n        expr: \\(.value | @json)\"" "$DASH" |
	sed -E "$unvar" >"$WORK/dash_exprs"
printf 'groups:\n  - name: dashboard\n    rules:\n' | cat - "$WORK/dash_exprs" >"$WORK/dash_rules.yml"
check "every dashboard expr parses as PromQL ($(grep -c ' expr: ' "$WORK/dash_rules.yml"))" \
	promtool check rules "$WORK/dash_rules.yml"

log "3. the names against a node's /metrics"
start_admin_node a --cache "$C"
wait_admin_node a
for ((i = 0; i < N; i++)); do
	CTL_QUIET=1 ctl a cache put "$C" "key$i" "value$i"
	[[ $CRC == 0 ]] || die "dgctl cache put key$i failed"
done
ctl a cache get "$C" key0
[[ $CRC == 0 && $OUT == value0 ]] || die "dgctl cache get key0: exit $CRC, '$OUT'"
raw=$WORK/a.raw
# shellcheck disable=SC2016  # $1 is the inner bash's
timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
	cat <&3' _ "${HPORT[a]}" >"$raw" || die "GET /metrics failed"
tr -d '\r' <"$raw" | sed '1,/^$/d' >"$WORK/a.prom"
check "the scrape answered 200" grep -q -E '^HTTP/1\.[01] 200 ' "$raw"
log "scraped $(grep -c -v '^#' "$WORK/a.prom") samples"
# the names the node serves: its samples' names and its families (TYPE)
grep -v '^#' "$WORK/a.prom" | sed -E 's/[{ ].*//' | sort -u >"$WORK/samples"
awk '$1 == "#" && $2 == "TYPE" { print $3, $4 }' "$WORK/a.prom" | sort -u >"$WORK/families"
check "the scrape has datagrid_ samples" grep -q '^datagrid_' "$WORK/samples"

# missing_names: of the names on stdin, those the scrape has neither as a
# sample nor as a family; name_bucket/_sum/_count count as their
# histogram family.
missing_names() {
	local name base
	while read -r name; do
		grep -q -x -F "$name" "$WORK/samples" && continue
		grep -q "^$name " "$WORK/families" && continue
		base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$name")
		[[ $base != "$name" ]] && grep -q -x -F "$base histogram" "$WORK/families" && continue
		echo "$name"
	done
}
# missing_matchers: of the lines "name key value" on stdin, those with no
# sample of name labelled key="value" in $PROM (default: the scrape).  The
# second grep reads all its input: a `grep -q` there stops at the first
# match, and under pipefail the first grep's SIGPIPE failed the pipeline
# whenever the match came before the end of a long output (op="get", the
# first op of each histogram: a flake, seen in CI).
missing_matchers() {
	local name key val prom=${PROM:-$WORK/a.prom}
	while read -r name key val; do
		grep -q -F "$name{" "$prom" || { echo "$name $key=\"$val\""; continue; }
		grep "^$name{" "$prom" | grep -E "[{,]$key=\"$val\"[,}]" >/dev/null && continue
		echo "$name $key=\"$val\""
	done
}
# the checkers must report what is wrong (a self-test)
check "missing_names reports a name the node does not serve" \
	test "$(printf 'datagrid_no_such_total\ndatagrid_cache_op_duration_seconds_bucket\n' | missing_names)" = datagrid_no_such_total
# missing_matchers finds a label on the first of many samples (more than a pipe
# holds: the first grep is still writing when the match is found)
{
	echo 'datagrid_t_bucket{op="get",le="1"} 1'
	for ((i = 0; i < 4000; i++)); do echo "datagrid_t_bucket{op=\"put\",le=\"$i\"} 1"; done
} >"$WORK/long.prom"
check "missing_matchers finds a label on the first of many samples" \
	test -z "$(PROM=$WORK/long.prom missing_matchers <<<'datagrid_t_bucket op get')"
check "missing_matchers reports a label value the node does not serve" \
	test "$(printf 'datagrid_cache_partitions state gone\ndatagrid_cache_partitions state lost\n' | missing_matchers)" = 'datagrid_cache_partitions state="gone"'

# the dashboard's text, its exprs unescaped (the raw JSON escapes quotes)
jq -r '.. | strings' "$DASH" >"$WORK/dash.txt"
for f in "$ALERTS" "$ALERTS_TEST" "$WORK/dash.txt"; do
	what=$(basename "$f")
	[[ $f == "$WORK/dash.txt" ]] && what=grafana-dashboard.json
	grep -o -E 'datagrid_[a-zA-Z0-9_:]+' "$f" | sort -u >"$WORK/names"
	# label="value" matchers on datagrid_ series (not =~, not $variables;
	# job and instance are the scrape's target labels, not the node's, and
	# a cache's name is the user's: alerts_test.yml's caches a and b)
	grep -o -E 'datagrid_[a-zA-Z0-9_:]+\{[^}]*\}' "$f" |
		awk '{ name = $0; sub(/\{.*/, "", name); sel = $0; sub(/^[^{]*\{/, "", sel)
			while (match(sel, /[a-zA-Z_][a-zA-Z0-9_]* *= *"[^"$]*"/)) {
				m = substr(sel, RSTART, RLENGTH); sel = substr(sel, RSTART + RLENGTH)
				k = m; sub(/ *=.*/, "", k); v = m; sub(/^[^"]*"/, "", v); sub(/"$/, "", v)
				if (k != "job" && k != "instance" && k != "cache") print name, k, v
			} }' | sort -u >"$WORK/matchers"
	nn=$(wc -l <"$WORK/names")
	nm=$(wc -l <"$WORK/matchers")
	check "$what references datagrid_ names ($nn)" test "$nn" -gt 0
	miss=$(missing_names <"$WORK/names")
	[[ -z $miss ]] || log "$what: names not in the scrape: $(tr '\n' ' ' <<<"$miss")"
	check "every datagrid_ name of $what is served ($nn names)" test -z "$miss"
	miss=$(missing_matchers <"$WORK/matchers")
	[[ -z $miss ]] || log "$what: label matchers no sample has: $(tr '\n' ' ' <<<"$miss")"
	check "every label=\"value\" matcher of $what matches a sample ($nm matchers)" test -z "$miss"
done

stop_all_checked
finish
