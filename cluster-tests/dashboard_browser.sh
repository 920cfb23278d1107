#!/usr/bin/env bash
# dashboard_browser: the dashboard (GET / on a node's http endpoint) in a
# real headless browser, driven over the DevTools protocol (cdplib.sh), read
# through its DOM while the cluster changes under it:
#  1. 3 dgnodes, cache dash (PARTITIONED, backups=1, FULL_SYNC) with 3000
#     entries, --rebalance-throttle 25ms (so that a partition's move lasts
#     long enough for a 2 s refresh to see it);
#  2. the page at n1, 1280x800: within 15 s it shows state ACTIVE, 3 nodes
#     that answer, the cache, and a partition map of 3 servers with 2048
#     owning copies (1024 primaries + 1024 backups), none moving;
#     the page made no request but to n1 and logged no error; a screenshot;
#  3. at a phone's width (390x844) nothing is wider than the screen; a
#     screenshot;
#  4. kill -9 n3: without a reload the page shows 2 nodes, partitions
#     MOVING (and the state REBALANCING), then all 2048 copies owning on 2
#     servers and ACTIVE again; a screenshot while they move;
#  5. kill -9 n1, the page's own node: the page says it is unreachable
#     (banner, data-reachable 0) and keeps the last figures.
# Screenshots go to the folder given as the fourth argument (the build
# folder; README.md shows one of them, copied to node/monitoring/).
set -euo pipefail
source "$(dirname "$0")/ctllib.sh"
source "$(dirname "$0")/cdplib.sh"
SHOTS=${4:-$WORK}
mkdir -p "$SHOTS"

cleanup_extra() { cleanup_cdp; }

FT=1000
C=dash
N=3000
NODE_ARGS=(--failure-detection-timeout "$FT" --rebalance-throttle 25ms
	--cache "$C,backups=1,sync=full_sync")

# What the test reads of the page: one JSON object from its DOM (the ids and
# data-* attributes index.html documents).
PROBE='(() => {
  const q = (s) => document.querySelector(s);
  const pm = q("#pm-summary").dataset;
  const wide = [...document.querySelectorAll("body *")].filter((e) =>
    e.getBoundingClientRect().right > document.documentElement.clientWidth + 1 &&
    !e.closest(".scroll")).length;
  return JSON.stringify({
    refreshes: +(document.body.dataset.refreshes || 0),
    reachable: document.body.dataset.reachable || "",
    banner: !q("#unreachable").hidden,
    state: q("#state").dataset.state || "",
    nodes: +(q("#nodes").dataset.count || 0),
    answered: document.querySelectorAll("#nodes tr[data-answered=\"1\"]").length,
    caches: [...document.querySelectorAll("#caches tr[data-cache]")].map((t) => t.dataset.cache),
    pm_cache: pm.cache || "", pm_nodes: +(pm.nodes || 0), owning: +(pm.owning || 0),
    moving: +(pm.moving || 0), lost: +(pm.lost || 0),
    scroll_w: document.documentElement.scrollWidth, view_w: window.innerWidth, wide,
    stale: q("#main").classList.contains("stale"),
  });
})()'

# page: evaluates PROBE; P holds its answer.
page() {
	cdp_eval "$PROBE"
	P=$CDP_VALUE
}
# pj FILTER: jq -e FILTER over the last probe.
pj() { jq -e "$1" >/dev/null <<<"$P"; }
# page_is FILTER: probes again and tests FILTER (for wait_until).
page_is() { page && pj "$1"; }

log "1. three servers, $N entries"
start_three "${NODE_ARGS[@]}"
seeds_of n1 n2 n3
client put 60000 "${SEEDS[@]}" --cache "$C" --failure-detection-timeout "$FT" put --count "$N"
[[ $CLIENT_RC == 0 ]] || die "the puts failed"
wait_until 10000 "the client left: 3 nodes" agree_nodes 3 n1 n2 n3

log "2. the page at n1 (http://127.0.0.1:${HPORT[n1]}/), 1280x800"
cdp_start
cdp_open "http://127.0.0.1:${HPORT[n1]}/" 1280 800
wait_until 15000 "the page shows 3 nodes, ACTIVE, and the map of $C on 3 servers" page_is \
	'.refreshes >= 2 and .state == "ACTIVE" and .nodes == 3 and .answered == 3 and
	 (.caches | index("'"$C"'")) and .pm_cache == "'"$C"'" and .pm_nodes == 3 and
	 .owning == 2048 and .moving == 0 and .lost == 0 and .reachable == "1" and (.banner | not)'
log "page: $P"
# every resource the page loaded came from n1 (the CSP allows nothing else;
# this checks the page asks for nothing else either)
cdp_eval 'JSON.stringify(performance.getEntriesByType("resource").map((r) => r.name)
  .filter((u) => !u.startsWith(location.origin + "/")))'
check "the page requested nothing but n1's own files and answers ($CDP_VALUE)" \
	test "$CDP_VALUE" = "[]"
cdp_eval 'JSON.stringify(performance.getEntriesByType("resource").map((r) =>
  new URL(r.name).pathname).filter((p, i, a) => a.indexOf(p) === i).sort())'
log "the page's requests: $CDP_VALUE"
check "it read /api/state, /api/nodes and /api/partitions" \
	jq -e 'index("/api/state") and index("/api/nodes") and index("/api/partitions")' <<<"$CDP_VALUE"
cdp_eval 'JSON.stringify(window.__cdp_errors)'
check "the page logged no error and threw nothing ($CDP_VALUE)" test "$CDP_VALUE" = "[]"
cdp_screenshot "$SHOTS/dashboard.png"

log "3. a phone's width"
cdp_viewport 390 844 true
wait_until 6000 "the page refreshed at 390 px" page_is '.view_w == 390'
R0=$(jq .refreshes <<<"$P")
wait_until 6000 "one more refresh" page_is ".refreshes > $R0"
log "page at 390 px: scrollWidth $(jq .scroll_w <<<"$P"), elements past the right edge $(jq .wide <<<"$P")"
check "at 390 px nothing is wider than the screen (tables scroll inside their box)" \
	pj '.scroll_w <= .view_w and .wide == 0'
cdp_screenshot "$SHOTS/dashboard-phone.png"
cdp_viewport 1280 800

log "4. kill -9 n3"
kill -KILL "${PID[n3]}"
now_ms
K0=$NOW
SEEN_MOVING=0 SEEN_REBAL=0 SEEN_TWO=0 MOVING_SHOT=0
# poll the live page (no reload) until it settles on 2 servers, noting
# what it showed on the way
settled() {
	page
	pj '.nodes == 2' && SEEN_TWO=1
	if pj '.moving > 0'; then
		((SEEN_MOVING)) || { now_ms; log "page: partitions moving $((NOW - K0)) ms after the kill: $P"; }
		SEEN_MOVING=1
		pj '.state == "REBALANCING"' && SEEN_REBAL=1
		if ((!MOVING_SHOT)); then
			cdp_screenshot "$SHOTS/dashboard-moving.png"
			MOVING_SHOT=1
		fi
	fi
	((SEEN_MOVING)) && pj '.nodes == 2 and .answered == 2 and .pm_nodes == 2 and
		.owning == 2048 and .moving == 0 and .lost == 0 and .state == "ACTIVE"'
}
wait_until 60000 "the page shows the partitions moving, then owning on 2 servers" settled
log "page: $P"
check "the page showed n3 gone (2 nodes)" test "$SEEN_TWO" = 1
check "the page showed partitions MOVING before they were all owning again" test "$SEEN_MOVING" = 1
check "the page showed the state REBALANCING while they moved" test "$SEEN_REBAL" = 1
ctl n2 partitions "$C" --json
check "dgctl partitions agrees: 2 servers, 1024 primaries and 1024 backups, none moving" \
	jout '[.caches[0].nodes[] | .primary] | add == 1024' 
check "  (backups)" jout '[.caches[0].nodes[] | .backup] | add == 1024 and length == 2'

log "5. kill -9 n1, the page's own node"
kill -KILL "${PID[n1]}"
wait_until 15000 "the page says its node does not answer" page_is \
	'.reachable == "0" and .banner and .stale'
cdp_eval 'document.querySelector("#unreachable").textContent'
log "banner: $CDP_VALUE"
check "the banner names the node and says since when" \
	grep -q "127.0.0.1:${HPORT[n1]}) does not answer since" <<<"$CDP_VALUE"
check "the last figures stay (2 nodes)" pj '.nodes == 2'
cdp_screenshot "$SHOTS/dashboard-unreachable.png"
finish
