/*
 * The datagrid dashboard's script.  Every 2 s it reads this node's
 * read-only JSON (/api/state, nodes, caches, partitions, metrics, txs,
 * baseline: the admin commands' answers, ADMIN.md) and redraws.  Rates are
 * differences of the node's counters between two refreshes.  Text from the
 * cluster (cache names, labels, addresses) only ever goes in as text
 * (textContent), never as markup.  When the node stops answering, a banner
 * says since when, and the figures stay, greyed, as they last were.
 */
"use strict";

const REFRESH_MS = 2000;
const FETCH_MS = 4000;      /* an answer's deadline: fan-outs end in 2 s */
const SPARK_POINTS = 60;

const $ = (id) => document.getElementById(id);
const state = {
  prev: null,               /* {t, metrics}: the last metrics answer */
  spark: [],
  lastOk: 0,
  downSince: 0,
  pmCache: "",
  maps: new Map(),          /* node id -> {el, cells, head} */
  refreshes: 0,
  lastPt: null,
  peakLeft: new Map(),
  typeHist: new Map(),      /* message type -> its last SPARK_POINTS rates */      /* cache -> most partitions left in this rebalancing */             /* the last partitions answer (the picker redraws it) */
};

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  if (props) for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
    else if (k === "text") e.textContent = String(v);
    else e.setAttribute(k, String(v));
  }
  for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
  return e;
}

function td(v, cls) { return el("td", { class: cls || "", text: v == null ? "—" : v }); }
function num(v, cls) { return td(v, "num " + (cls || "")); }

function fill(tbodyOf, rows, empty, cols) {
  const tb = $(tbodyOf).tBodies[0];
  tb.replaceChildren(...rows);
  if (rows.length === 0)
    tb.append(el("tr", null, el("td", { class: "muted", colspan: cols, text: empty })));
}

function ago(ms) {
  if (ms == null) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}

function fmt(x, digits) {
  if (x == null || !isFinite(x)) return "—";
  if (Math.abs(x) >= 100 || digits === 0) return Math.round(x).toLocaleString("en");
  return x.toFixed(digits == null ? 1 : digits);
}

function shortId(id) { return id ? id.slice(0, 8) : "—"; }

async function api(name) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_MS);
  try {
    const r = await fetch("/api/" + name, { cache: "no-store", signal: ctl.signal,
      credentials: "same-origin" });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (body && body.ok) return { ok: true, result: body.result };
    return { ok: false, reached: true,
      error: body && body.error ? body.error : "HTTP " + r.status };
  } catch (e) {
    return { ok: false, reached: false, error: e.name === "AbortError" ? "no answer in time" : "unreachable" };
  } finally {
    clearTimeout(timer);
  }
}

/* ---- header: state, topology, coordinator, baseline, majority ---- */

function drawState(st, bl) {
  const b = $("state");
  if (!st.ok) { b.textContent = "unknown"; b.dataset.state = ""; b.title = st.error; return; }
  const s = st.result;
  b.textContent = s.state;
  b.dataset.state = s.state;
  b.title = s.state === "REBALANCING" ? "partitions moving: " + s.partitions_moving :
    s.state === "LOST_PARTITIONS" ? "partitions lost: " + s.partitions_lost : "";
  $("cluster-name").textContent = "cluster " + s.cluster;
  $("topver").textContent = "v" + s.topology_version + " · " + s.servers + " servers" +
    (s.clients ? ", " + s.clients + " clients" : "") + (s.standby ? ", " + s.standby + " standby" : "");
  $("coordinator").textContent = (s.coordinator_address || "") + " (" + shortId(s.coordinator) + ")";
  const q = s.quorum || {};
  $("quorum").textContent = q.partition_policy === "none" ? "not required" :
    (q.segmented ? "LOST: " : "") + q.reachable + " of " + q.voters + " voters reachable, need " + q.need;
  if (bl && bl.ok) {
    const r = bl.result;
    const on = (r.baseline || []).filter((x) => x.online).length;
    $("baseline").textContent = r.auto ? "automatic" :
      (r.baseline || []).length + " nodes, " + on + " online" +
      ((r.standby || []).length ? ", " + r.standby.length + " standby" : "");
  } else if (!s.baseline_set) {
    $("baseline").textContent = "automatic";
  }
}

/* ---- nodes ---- */

function drawNodes(nd) {
  if (!nd.ok) { fill("nodes", [], "no answer: " + nd.error, 7); return; }
  const r = nd.result;
  const rows = r.nodes.map((n) => {
    const answered = n.uptime_ms != null;
    const role = n.role + (n.standby ? ", standby" : "") + (n.coordinator ? ", coordinator" : "") +
      (n.id === r.self ? " (this node)" : "");
    return el("tr", { class: answered ? "" : "down",
      data: { id: n.id, address: n.address, role: n.role, answered: answered ? 1 : 0 } },
      num(n.order), td(shortId(n.id)), td(n.address), td(role),
      td(answered ? ago(n.uptime_ms) : "—"), td(n.version || "—"),
      td(answered ? "yes" : "NO ANSWER" + (n.error ? ": " + n.error : "")));
  });
  fill("nodes", rows, "no nodes", 7);
  $("nodes-count").textContent = "(" + r.nodes.length + ")";
  $("nodes").dataset.count = r.nodes.length;
}

/* ---- caches ---- */

function drawCaches(cl, st) {
  if (!cl.ok) { fill("caches", [], "no answer: " + cl.error, 8); return; }
  const reb = new Map();
  if (st.ok) for (const c of st.result.caches || []) reb.set(c.cache, c);
  const rows = cl.result.caches.map((c) => {
    const rb = reb.get(c.name);
    let moving = "—";
    if (rb) {
      /* progress since this rebalancing began: against the most partitions
       * left seen since (done counts every rebalancing the cache had) */
      const left = rb.left + rb.repairing;
      const peak = left > 0 ? Math.max(state.peakLeft.get(c.name) || 0, left) : 0;
      state.peakLeft.set(c.name, peak);
      moving = left > 0 ?
        el("span", null, el("progress", { max: peak, value: peak - left }),
          " " + left + " partitions left" + (rb.repairing ? " (" + rb.repairing + " repairing)" : "") +
          (rb.lost ? ", " + rb.lost + " LOST" : "")) :
        rb.lost ? rb.lost + " partitions LOST" : "done";
    }
    const cell = el("td", null, moving);
    return el("tr", { data: { cache: c.name } }, td(c.name), td(c.mode),
      num(c.mode === "replicated" ? "all" : c.backups), td(c.sync), td(c.atomicity),
      num(fmt(c.size, 0)), td(c.persistence ? "on" : "off"), cell);
  });
  fill("caches", rows, "no caches", 8);
  $("caches-count").textContent = "(" + cl.result.caches.length + ")";
  $("caches").dataset.count = cl.result.caches.length;
  /* the partition map's cache picker */
  const sel = $("pm-cache");
  const names = cl.result.caches.map((c) => c.name);
  const have = Array.from(sel.options).map((o) => o.value);
  if (names.join("\n") !== have.join("\n")) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
    if (names.includes(state.pmCache)) sel.value = state.pmCache;
  }
  if (!names.includes(state.pmCache)) state.pmCache = names.length ? names[0] : "";
  sel.value = state.pmCache;
}

/* ---- partition map: one grid of cells per server ---- */

const CELL = { P: "st-P", B: "st-B", M: "st-M", m: "st-M", L: "st-L", l: "st-L", O: "st-P" };
const WORD = { P: "primary", B: "backup", M: "moving (primary)", m: "moving (backup)",
  L: "LOST (primary)", l: "LOST (backup)", ".": "not an owner" };

function mapFor(node, parts) {
  let m = state.maps.get(node.id);
  if (m && m.cells.length === parts) return m;
  if (m) m.el.remove();
  const grid = el("div", { class: "grid", role: "img" });
  const cells = [];
  for (let p = 0; p < parts; p++) {
    const c = el("span", { class: "cell st-none" });
    cells.push(c);
    grid.append(c);
  }
  const head = el("h3");
  const box = el("div", { class: "pmap" }, head, grid);
  m = { el: box, cells, head, grid, map: "" };
  state.maps.set(node.id, m);
  return m;
}

function drawPartitions(pt) {
  const host = $("pmaps");
  const sum = $("pm-summary");
  if (!pt.ok) { sum.textContent = "no answer: " + pt.error; return; }
  const cache = (pt.result.caches || []).find((c) => c.cache === state.pmCache);
  const seen = new Set();
  let owning = 0, moving = 0, lost = 0;
  if (cache) {
    for (const n of cache.nodes) {
      seen.add(n.id);
      const m = mapFor(n, cache.partitions);
      if (m.el.parentNode !== host) host.append(m.el);
      if (m.map !== n.map) {
        for (let p = 0; p < m.cells.length; p++) {
          const ch = n.map[p] || ".";
          if (ch === m.map[p]) continue;
          m.cells[p].className = "cell " + (CELL[ch] || "st-none");
          m.cells[p].title = "partition " + p + ": " + (WORD[ch] || ch);
        }
        m.map = n.map;
      }
      m.head.replaceChildren(n.address + " ", el("span", { class: "muted",
        text: "(" + shortId(n.id) + ") " + n.primary + " primary · " + n.backup + " backup · " +
          n.moving + " moving · " + n.lost + " lost" + (n.standby ? " · standby" : "") }));
      m.grid.setAttribute("aria-label", "partitions of " + cache.cache + " on " + n.address + ": " +
        n.primary + " primary, " + n.backup + " backup, " + n.moving + " moving, " + n.lost + " lost");
      Object.assign(m.el.dataset, { node: n.id, address: n.address, primary: n.primary,
        backup: n.backup, moving: n.moving, lost: n.lost });
      owning += n.primary + n.backup;
      moving += n.moving;
      lost += n.lost;
    }
  }
  for (const [id, m] of state.maps) if (!seen.has(id)) { m.el.remove(); state.maps.delete(id); }
  const gone = (pt.result.nodes_unanswered || []).length;
  sum.textContent = cache ? seen.size + " servers: " + owning + " owning copies, " + moving +
    " moving, " + lost + " lost" + (gone ? "; " + gone + " servers did not answer" : "") : "no cache";
  Object.assign(sum.dataset, { cache: cache ? cache.cache : "", owning, moving, lost,
    nodes: seen.size, topology: pt.result.topology_version });
}

/* ---- messages and latency: rates between two refreshes ---- */

function drawMetrics(mt) {
  if (!mt.ok) { fill("messages", [], "no answer: " + mt.error, 6); return; }
  const now = performance.now(), m = mt.result;
  const prev = state.prev;
  state.prev = { t: now, m };
  const dt = prev ? (now - prev.t) / 1000 : 0;
  const before = new Map();
  if (prev) for (const x of prev.m.messages) before.set(x.type, x);
  let total = 0;
  const rows = [];
  for (const x of m.messages) {
    const b = before.get(x.type);
    const rate = (k) => (b && dt > 0 ? Math.max(0, x[k] - b[k]) / dt : null);
    const s = rate("sent"), r = rate("received");
    total += (s || 0) + (r || 0);
    let h = state.typeHist.get(x.type);
    if (!h) state.typeHist.set(x.type, h = []);
    if (s != null) {
      h.push(s + r);
      if (h.length > SPARK_POINTS) h.shift();
    }
    rows.push({ x, s, r, bo: rate("bytes_sent"), bi: rate("bytes_received"), h });
  }
  rows.sort((a, b) => ((b.s || 0) + (b.r || 0)) - ((a.s || 0) + (a.r || 0)) || a.x.type.localeCompare(b.x.type));
  fill("messages", rows.slice(0, 16).map((w) => el("tr", { data: { type: w.x.type } },
    td(w.x.type), el("td", null, spark(w.h, "small", w.x.type + " messages per second")),
    num(fmt(w.s)), num(fmt(w.r)), num(fmt(w.bo == null ? null : w.bo / 1024)),
    num(fmt(w.bi == null ? null : w.bi / 1024)), num(w.x.failures))), "no messages yet", 7);
  if (prev) {
    state.spark.push(total);
    if (state.spark.length > SPARK_POINTS) state.spark.shift();
    drawSpark();
  }
  /* latency per cache and operation */
  const lrows = [];
  const pc = new Map();
  if (prev) for (const c of prev.m.caches || []) pc.set(c.cache, c);
  for (const c of m.caches || []) {
    for (const op of ["get", "put", "remove"]) {
      const h = c[op];
      if (!h) continue;
      const b = pc.get(c.cache);
      const rate = b && b[op] && dt > 0 ? Math.max(0, h.count - b[op].count) / dt : null;
      const q = (v) => (v < 0 ? "> last bucket" : fmt(v));
      lrows.push(el("tr", { data: { cache: c.cache, op } }, td(c.cache), td(op), num(fmt(rate)),
        num(h.count ? q(h.p50_us) : "—"), num(h.count ? q(h.p99_us) : "—"),
        num(h.count ? fmt(h.mean_us) : "—")));
    }
  }
  fill("latency", lrows, "no caches", 6);
}

/* A line of the last SPARK_POINTS rates in svg (made when null), newest
 * at the right; its title says the last value and the peak in words. */
function spark(pts, cls, what, svg) {
  const NS = "http://www.w3.org/2000/svg";
  if (!svg) {
    svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 300 40");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", "spark " + cls);
    svg.setAttribute("role", "img");
  }
  const max = Math.max(1, ...pts);
  const step = 300 / (SPARK_POINTS - 1);
  const off = SPARK_POINTS - pts.length;
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.map((v, i) => ((off + i) * step).toFixed(1) + "," +
    (38 - (v / max) * 36).toFixed(1)).join(" "));
  const label = document.createElementNS(NS, "title");
  const words = what + ", last " + pts.length * REFRESH_MS / 1000 + " s: now " +
    fmt(pts[pts.length - 1]) + ", peak " + fmt(max);
  label.textContent = words;
  svg.setAttribute("aria-label", words);
  svg.replaceChildren(label, line);
  return svg;
}

function drawSpark() {
  spark(state.spark, "", "messages per second, all types", $("msg-spark"));
}

/* ---- transactions ---- */

function drawTxs(tx) {
  if (!tx.ok) { fill("txs", [], "no answer: " + tx.error, 9); return; }
  const t = tx.result.txs || [];
  fill("txs", t.slice(0, 50).map((x) => el("tr", { data: { tx: x.id } }, td(x.id), td(x.address),
    td(x.role), td(x.state), td(x.concurrency), td(x.isolation), num(ago(x.age_ms)),
    num(x.keys), td(x.label || ""))), "none running", 9);
  $("txs-count").textContent = "(" + t.length + (t.length > 50 ? ", first 50 shown" : "") + ")";
}

/* ---- the loop ---- */

function reachable(ok) {
  const ban = $("unreachable");
  const main = $("main");
  document.body.dataset.reachable = ok ? "1" : "0";
  if (ok) {
    state.downSince = 0;
    ban.hidden = true;
    main.classList.remove("stale");
    return;
  }
  if (!state.downSince) state.downSince = Date.now();
  ban.textContent = "This node (" + location.host + ") does not answer since " +
    new Date(state.downSince).toLocaleTimeString() + ". The figures below are from " +
    (state.lastOk ? new Date(state.lastOk).toLocaleTimeString() : "never") +
    ". The page keeps trying every " + REFRESH_MS / 1000 + " s.";
  ban.hidden = false;
  main.classList.add("stale");
}

async function refresh() {
  const names = ["state", "nodes", "caches", "partitions", "metrics", "txs", "baseline"];
  const got = await Promise.all(names.map(api));
  const a = Object.fromEntries(names.map((n, i) => [n, got[i]]));
  const anyReached = got.some((g) => g.ok || g.reached);
  reachable(anyReached);
  if (anyReached) {
    state.lastOk = Date.now();
    const draws = [() => drawState(a.state, a.baseline), () => drawNodes(a.nodes),
      () => drawCaches(a.caches, a.state), () => drawPartitions(state.lastPt = a.partitions),
      () => drawMetrics(a.metrics), () => drawTxs(a.txs)];
    for (const d of draws) {
      try { d(); } catch (e) { console.error(e); }
    }
    state.refreshes++;
    document.body.dataset.refreshes = state.refreshes;
  }
  $("updated").textContent = anyReached ? "updated " + new Date().toLocaleTimeString() :
    "last answer " + (state.lastOk ? new Date(state.lastOk).toLocaleTimeString() : "never");
}

async function loop() {
  const t0 = performance.now();
  try { await refresh(); } catch (e) { console.error(e); }
  setTimeout(loop, Math.max(200, REFRESH_MS - (performance.now() - t0)));
}

document.addEventListener("DOMContentLoaded", () => {
  $("pm-cache").addEventListener("change", (e) => {
    state.pmCache = e.target.value;
    if (state.lastPt) drawPartitions(state.lastPt);
  });
  loop();
});
