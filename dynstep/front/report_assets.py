"""The report page's style sheet and script, inlined into every page (no network, works from file://).

The script is plain JavaScript with no dependency: the hits table (sort by any column, filter by
text, kind and non-finite, 100 rows a page: only one page is ever in the DOM, so a 10,000-hit run
opens at once), the charts' tooltip, the panel filter, and "go to the first NaN". It reads its data
from ``<script type="application/json">`` blocks and writes text only through `textContent`, so no
string from the recording is ever parsed as HTML. It sets ``window.__dynstepReady`` when done.
"""

CSS = """
:root{--bad:#a50e0e;--badbg:#fce8e6;--line:#dadce0;--muted:#5f6368}
body{font:13px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#202124;background:#fff}
header{padding:14px 24px 8px;border-bottom:1px solid var(--line)}
h1{font-size:20px;margin:0} h2{font-size:16px;margin:28px 0 8px} .sub{color:var(--muted);word-break:break-all}
nav{padding:6px 24px;border-bottom:1px solid var(--line);position:sticky;top:0;background:#fff;z-index:2}
nav a{margin-right:14px;color:#1a73e8;text-decoration:none} main{padding:0 24px 40px}
a{color:#1a73e8} code{font:12px ui-monospace,Menlo,Consolas,monospace;background:#f1f3f4;padding:0 3px;border-radius:3px}
.banner{margin:14px 0;padding:10px 14px;border-radius:6px;background:var(--badbg);color:var(--bad);border:1px solid #f5c2c0}
.banner.ok{background:#e6f4ea;color:#137333;border-color:#b7dfc2} .problems{background:#fef7e0;color:#8a6d00;border-color:#f6e0a0}
table{border-collapse:collapse} th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#f1f3f4;font-weight:600;white-space:nowrap} table.kv th{background:none;color:var(--muted);font-weight:normal}
div.cols{display:flex;gap:32px;flex-wrap:wrap;align-items:flex-start} table.kv td{word-break:break-word;max-width:560px}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.legend{color:var(--muted);margin:4px 0 10px} .key{margin-right:14px;white-space:nowrap} .key svg{vertical-align:middle;margin-right:4px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(980px,1fr));gap:10px}
.panel{border:1px solid var(--line);border-radius:6px;padding:6px 10px} .panel.bad{border-color:#d93025;background:#fffafa}
.panel.first{box-shadow:0 0 0 3px #f28b82} .panel h3{font-size:13px;margin:2px 0 4px;font-weight:600}
.panel .where{color:var(--muted);font-weight:normal} .pair{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.pair h4{margin:0;font-size:12px;font-weight:normal;color:var(--muted)} .none{color:var(--muted);padding:50px 0;text-align:center}
svg.chart{display:block;max-width:560px} svg .frame{fill:#fff;stroke:#eee} svg .strip{fill:#fafafa;stroke:#eee}
svg polyline,.key line{fill:none;stroke-width:1.4} svg .tick{font-size:10px;fill:var(--muted)} svg .zero{stroke:#ccc;stroke-dasharray:2 2}
.min{stroke:#1a73e8} .max{stroke:#e37400} .mean{stroke:#188038} .absmax{stroke:#80868b;stroke-dasharray:4 3}
circle.min{fill:#1a73e8} circle.max{fill:#e37400} circle.mean{fill:#188038} circle.absmax{fill:#80868b;stroke-dasharray:none}
.band{fill:#188038;fill-opacity:.12;stroke:none} .badbar{fill:#d93025} .firstbad{stroke:#d93025;stroke-width:2}
svg.hist{display:block;max-width:560px;margin-top:2px} svg .bar{fill:#1a73e8;fill-opacity:.7} svg .tick.bad{fill:#d93025}
.cursor{stroke:#9aa0a6;stroke-width:1}
#tip{position:fixed;pointer-events:none;background:#202124;color:#fff;padding:4px 8px;border-radius:4px;font-size:12px;
 white-space:pre;display:none;z-index:5}
.controls{margin:6px 0;display:flex;gap:10px;align-items:center;flex-wrap:wrap} input[type=search]{width:260px}
#hits-table th{cursor:pointer;position:sticky;top:31px} #hits-table th.sorted::after{content:attr(data-dir)}
tr.bad td{color:var(--bad)} tr.first td{background:var(--badbg);font-weight:600} tr.flash td{background:#fde293}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;margin:1px 2px 1px 0;white-space:nowrap}
.b-value{background:#e8f0fe;color:#1967d2} .b-grad{background:#fce8e6;color:#c5221f} .b-pause{background:#fef7e0;color:#b06000}
.b-step{background:#f1f3f4;color:var(--muted)} .b-graph_break{background:#fce8e6;color:#c5221f} .b-recompile{background:#fef7e0;color:#b06000}
tr.quiet td{color:#9aa0a6} details{margin:6px 0} summary{cursor:pointer} .detail{white-space:pre-wrap;color:var(--muted)} .hint{color:var(--muted)}
"""

JS = r"""
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const HITS = JSON.parse($("dynstep-hits").textContent);
  const POINTS = JSON.parse($("dynstep-points").textContent);
  const C = {}; HITS.cols.forEach((c, i) => { C[c] = i; });
  const STRINGS = ["kind", "graph", "node", "op", "module", "source"].map((c) => C[c]);
  const PAGE = 100;
  let view = HITS.rows, sortCol = C["#"], sortDir = 1, page = 0;
  const tbody = document.querySelector("#hits-table tbody");
  const headRow = document.querySelector("#hits-table thead tr");
  const fmt = (v) => (v === null ? "nan" : typeof v !== "number" ? String(v) :
    (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) ? v.toExponential(3) : String(+v.toPrecision(5)));
  const bad = (r) => r[C.nan] > 0 || r[C.inf] > 0;

  HITS.cols.forEach((c, i) => {
    if (c === "src") return;
    const th = document.createElement("th");
    th.textContent = c;
    th.addEventListener("click", () => { sortDir = sortCol === i ? -sortDir : 1; sortCol = i; apply(); });
    headRow.appendChild(th);
  });

  function compare(a, b) {
    const x = a[sortCol], y = b[sortCol];
    if (x === y) return a[0] - b[0];
    if (x === null) return 1;
    if (y === null) return -1;
    return (x < y ? -1 : 1) * sortDir;
  }

  function apply() {
    const q = $("hit-filter").value.trim().toLowerCase();
    const kind = $("hit-kind").value, onlyBad = $("hit-bad").checked;
    view = HITS.rows.filter((r) => (!kind || r[C.kind] === kind) && (!onlyBad || bad(r)) &&
      (!q || STRINGS.some((i) => String(r[i]).toLowerCase().includes(q))));
    view.sort(compare);
    headRow.querySelectorAll("th").forEach((th, i) => {
      th.classList.toggle("sorted", i === sortCol); th.dataset.dir = sortDir > 0 ? " \u25b2" : " \u25bc"; });
    page = 0; render();
  }

  function cell(tr, r, i) {
    const td = document.createElement("td");
    const v = r[i];
    if (HITS.cols[i] === "source" && r[C.src]) {
      const a = document.createElement("a"); a.href = "#" + r[C.src]; a.textContent = v; td.appendChild(a);
    } else {
      td.textContent = fmt(v);
      if (typeof v === "number" || v === null) td.className = "num";
    }
    tr.appendChild(td);
  }

  function render() {
    const pages = Math.max(1, Math.ceil(view.length / PAGE));
    page = Math.min(Math.max(page, 0), pages - 1);
    const frag = document.createDocumentFragment();
    for (const r of view.slice(page * PAGE, page * PAGE + PAGE)) {
      const tr = document.createElement("tr");
      tr.id = "hit-" + r[C["#"]];
      if (bad(r)) tr.className = "bad";
      if (r[C["#"]] === HITS.first) tr.className = "first";
      for (let i = 0; i < HITS.cols.length; i++) if (HITS.cols[i] !== "src") cell(tr, r, i);
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
    $("hit-page").textContent = "page " + (page + 1) + " of " + pages + " \u00b7 " + view.length + " of " + HITS.rows.length + " hits";
  }

  function gotoHit(seq) {
    $("hit-filter").value = ""; $("hit-kind").value = ""; $("hit-bad").checked = false;
    sortCol = C["#"]; sortDir = 1; apply();
    const index = view.findIndex((r) => r[C["#"]] === seq);
    page = Math.floor(Math.max(index, 0) / PAGE); render();
    const tr = $("hit-" + seq);
    if (tr) { tr.scrollIntoView({block: "center"}); tr.classList.add("flash"); }
  }

  $("hit-filter").addEventListener("input", apply);
  $("hit-kind").addEventListener("change", apply);
  $("hit-bad").addEventListener("change", apply);
  $("hit-prev").addEventListener("click", () => { page--; render(); });
  $("hit-next").addEventListener("click", () => { page++; render(); });
  const goto = $("goto-first");
  if (goto) goto.addEventListener("click", (e) => { e.preventDefault(); gotoHit(HITS.first); });

  const panelFilter = $("panel-filter");
  if (panelFilter) panelFilter.addEventListener("input", () => {
    const q = panelFilter.value.trim().toLowerCase();
    document.querySelectorAll(".panel").forEach((p) => { p.hidden = !!q && !p.dataset.label.toLowerCase().includes(q); });
  });

  const tip = $("tip");
  document.querySelectorAll("svg.chart").forEach((svg) => {
    const pts = POINTS[svg.dataset.chart], n = +svg.dataset.n, left = +svg.dataset.left, right = +svg.dataset.right;
    const cursor = svg.querySelector(".cursor"), width = svg.viewBox.baseVal.width;
    svg.addEventListener("mousemove", (e) => {
      const box = svg.getBoundingClientRect(), x = (e.clientX - box.left) * width / box.width;
      const i = Math.min(n - 1, Math.max(0, Math.floor((x - left) / (right - left) * n)));
      const cx = left + (i + 0.5) * (right - left) / n;
      cursor.setAttribute("x1", cx); cursor.setAttribute("x2", cx); cursor.setAttribute("visibility", "visible");
      tip.textContent = "call " + pts.call[i] + "\n" + ["min", "max", "mean", "std", "absmax", "nan", "inf"]
        .map((k) => k + " " + fmt(pts[k][i])).join("\n");
      tip.style.display = "block"; tip.style.left = (e.clientX + 14) + "px"; tip.style.top = (e.clientY + 10) + "px";
    });
    svg.addEventListener("mouseleave", () => { tip.style.display = "none"; cursor.setAttribute("visibility", "hidden"); });
  });

  apply();
  window.__dynstepReady = {rows: HITS.rows.length, panels: document.querySelectorAll(".panel").length,
                           gotoHit: gotoHit};
})();
"""
