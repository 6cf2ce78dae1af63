/* kvsched report.html: the page's script (inlined into every report; loads nothing).
 *
 * The data (a JSON element written by kvsched/report_view/html.py) holds, per variant, a
 * timeline per replica as min/max envelopes at several resolutions (envelope.py), the
 * requests' figures and their phases (phases.py), and the incidents as intervals
 * (spans.py). Columns are zlib-compressed typed arrays in base64, inflated with the
 * browser's DecompressionStream. Everything is drawn as SVG: a timeline draws at most a
 * point per pixel (the coarsest level that still has one), a Gantt at most MAX_ROWS rows.
 */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("kvsched-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const MAX_ROWS = 150;
  const UNIT = DATA.time_unit === "s" ? "s" : "steps";
  const PANELS = [
    {title: "requests running / waiting", series: ["running", "waiting"]},
    {title: "KV blocks used / cached / free", series: ["used", "cached", "free"], pool: true},
    {title: "tokens per step: scheduled / prefill / recomputed",
     series: ["tokens", "prefill", "recompute"], budget: true},
    {title: "preemptions", series: ["preempted"], sum: true},
  ];
  const state = {variant: 0, replica: 0, compare: -1, x0: 0, x1: 1, incident: null,
                 search: null, message: ""};
  const cache = new Map();

  // -- decoding -----------------------------------------------------------------------
  async function inflate(b64) {
    const text = atob(b64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  async function column(packed) {
    if (!packed) return null;
    const raw = await inflate(packed.data);
    const n = packed.n;
    if (packed.type === "i32d") {
      const deltas = new Int32Array(raw.buffer, raw.byteOffset, n);
      const out = new Float64Array(n);
      let sum = 0;
      for (let i = 0; i < n; i++) { sum += deltas[i]; out[i] = sum; }
      return out;
    }
    if (packed.type === "f64s") {  // bytes shuffled: every value's byte 0, then byte 1...
      const bytes = new Uint8Array(n * 8);
      for (let b = 0; b < 8; b++) {
        const plane = b * n;
        for (let i = 0; i < n; i++) bytes[i * 8 + b] = raw[plane + i];
      }
      return new Float64Array(bytes.buffer);
    }
    if (packed.type === "f64") return new Float64Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + n * 8));
    return Float64Array.from(new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + n * 4)));
  }

  async function columns(obj) {
    const out = {};
    await Promise.all(Object.keys(obj).map(async (k) => { out[k] = await column(obj[k]); }));
    return out;
  }

  async function load(index) {
    if (cache.has(index)) return cache.get(index);
    const v = DATA.variants[index];
    const promise = (async () => {
      const timelines = await Promise.all(v.replicas.map(async (r) => {
        if (!r.timeline) return null;
        const levels = await Promise.all(r.timeline.levels.map(async (lv, L) => {
          const c = await columns(lv);
          c.t1 = new Float64Array(c.t0.length);
          for (let i = 0; i < c.t0.length; i++) c.t1[i] = c.t0[i] + c.span[i];
          for (const key of Object.keys(c)) {
            if (key.endsWith(".lo") && !c[key.slice(0, -3) + ".hi"]) c[key.slice(0, -3) + ".hi"] = c[key];
          }
          c.level = L;
          return c;
        }));
        return {levels: levels, num_blocks: r.num_blocks, rows_per_point: r.timeline.rows_per_point,
                factor: r.timeline.factor};
      }));
      const req = v.requests;
      const requests = await columns({status: req.status, arrival: req.arrival, first_token: req.first_token,
        finish: req.finish, ttft: req.ttft, tpot: req.tpot, e2e: req.e2e, prompt: req.prompt,
        output: req.output, preemptions: req.preemptions, replica: req.replica});
      requests.id = req.id;
      const phases = await columns(v.phases);
      const n = req.id.length;
      const first = new Int32Array(n + 1);  // phases of request r: first[r]..first[r+1]
      for (let i = 0; i < phases.request.length; i++) first[phases.request[i] + 1]++;
      for (let r = 0; r < n; r++) first[r + 1] += first[r];
      const ends = new Float64Array(n);  // a request's last moment in the records
      for (let r = 0; r < n; r++) {
        let e = requests.arrival[r];
        for (let p = first[r]; p < first[r + 1]; p++) e = Math.max(e, phases.end[p]);
        ends[r] = e;
      }
      const byId = new Map(req.id.map((id, i) => [id, i]));
      return {meta: v, timelines, requests, phases, first, ends, byId};
    })();
    cache.set(index, promise);
    return promise;
  }

  // -- helpers ------------------------------------------------------------------------
  function el(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function svg(tag, attrs, parent, text) {
    const node = document.createElementNS(NS, tag);
    for (const k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(x) {
    if (x === null || x === undefined || Number.isNaN(x)) return "-";
    if (Number.isInteger(x)) return x.toLocaleString("en-US");
    const a = Math.abs(x);
    if (a >= 1000) return Math.round(x).toLocaleString("en-US");
    const text = a >= 1 ? x.toPrecision(4) : x.toPrecision(3);
    return text.includes("e") || !text.includes(".") ? text : text.replace(/\.?0+$/, "");
  }
  function lowerBound(arr, x) {  // first index with arr[i] >= x
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function ticks(a, b, count) {
    const span = b - a;
    if (!(span > 0)) return [a];
    const raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let t = Math.ceil(a / step) * step; t <= b + 1e-9 * span; t += step) out.push(+t.toPrecision(12));
    out.step = step;
    return out;
  }
  function tickText(t, step) {
    // as many decimals as the tick step needs (1,000.25 beside 1,000.5, not 1,000 twice)
    const decimals = Math.max(0, Math.min(12, -Math.floor(Math.log10(step) + 1e-9)));
    return t.toLocaleString("en-US", {minimumFractionDigits: decimals, maximumFractionDigits: decimals});
  }
  function runEnd() { return Math.max(...DATA.variants.map((v) => v.end), 1e-9); }

  // -- page ---------------------------------------------------------------------------
  const app = document.getElementById("app");
  el("h1", {}, app, "kvsched report: " + DATA.scenario);
  if (DATA.description) el("p", {class: "description"}, app, DATA.description);
  el("div", {class: "meta"}, app, `kvsched ${DATA.kvsched}; times in ${UNIT === "s" ? "seconds" : "steps"}; ` +
     `${DATA.variants.length} variant(s). Wheel to zoom, drag to pan, double-click to see the whole run.`);
  const controls = el("div", {class: "controls"}, app);
  const pick = el("select", {id: "variant"}, el("label", {}, controls, "variant "));
  const pickReplica = el("select", {id: "replica"}, el("label", {}, controls, "replica "));
  const pickCompare = el("select", {id: "compare"}, el("label", {}, controls, "side by side with "));
  DATA.variants.forEach((v, i) => { el("option", {value: i}, pick, v.name); });
  el("option", {value: -1}, pickCompare, "(none)");
  DATA.variants.forEach((v, i) => { el("option", {value: i}, pickCompare, v.name); });
  const windowBox = el("input", {type: "text", id: "window", title: "START..END"},
                       el("label", {}, controls, "window "));
  el("button", {id: "zoom-in"}, controls, "+").onclick = () => zoomBy(0.5);
  el("button", {id: "zoom-out"}, controls, "\u2212").onclick = () => zoomBy(2);
  el("button", {id: "zoom-reset"}, controls, "whole run").onclick = () => resetZoom();
  const searchBox = el("input", {type: "text", id: "search", placeholder: "request id"},
                       el("label", {}, controls, "find "));
  el("button", {id: "search-go"}, controls, "go").onclick = () => search(searchBox.value.trim());
  searchBox.addEventListener("keydown", (e) => { if (e.key === "Enter") search(searchBox.value.trim()); });
  windowBox.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    const m = windowBox.value.match(/^\s*(-?[\d.e+]+)\s*\.\.\s*(-?[\d.e+]+)\s*$/);
    if (m && +m[2] > +m[1]) { state.x0 = +m[1]; state.x1 = +m[2]; render(); }
  });

  el("h2", {}, app, "Summary");
  const summaryBox = el("div", {id: "summary"}, app);
  el("h2", {}, app, "Incidents");
  const incidentBox = el("div", {id: "incidents"}, app);
  el("h2", {}, app, "Timeline and requests");
  const messageBox = el("div", {class: "message", id: "message"}, app);
  const columnsBox = el("div", {class: "columns", id: "columns"}, app);
  el("h2", {}, app, "Distributions");
  const histBox = el("div", {class: "hists", id: "distributions"}, app);

  pick.onchange = () => { state.variant = +pick.value; state.replica = 0; state.incident = null; refresh(); };
  pickReplica.onchange = () => { state.replica = +pickReplica.value; render(); };
  pickCompare.onchange = () => { state.compare = +pickCompare.value; refresh(); };

  function summaryTable() {
    summaryBox.textContent = "";
    const keys = ["num_requests", "num_finished", "num_starved", "ttft_p50", "ttft_p99", "tpot_p99",
                  "e2e_p99", "throughput", "num_preemptions", "recompute_ratio", "peak_blocks_used"];
    const table = el("table", {class: "summary"}, summaryBox);
    const head = el("tr", {}, table);
    el("th", {}, head, "variant");
    keys.forEach((k) => el("th", {}, head, k));
    el("th", {}, head, "incidents");
    DATA.variants.forEach((v, i) => {
      const cls = i === state.variant ? "picked" : i === state.compare ? "compared" : "";
      const row = el("tr", {class: cls}, table);
      el("td", {}, row, v.name);
      keys.forEach((k) => el("td", {}, row, fmt(v.summary[k])));
      el("td", {}, row, [...new Set(v.incidents.map((s) => s.kind))].join(", ") || "-");
    });
  }

  function incidentList() {
    incidentBox.textContent = "";
    const v = DATA.variants[state.variant];
    if (!v.incidents.length) { el("div", {class: "message"}, incidentBox, `${v.name}: no incident`); return; }
    const list = el("ul", {class: "incidents"}, incidentBox);
    v.incidents.forEach((s, i) => {
      const li = el("li", {class: state.incident === i ? "selected" : "", "data-kind": s.kind}, list);
      const b = el("button", {"data-incident": i}, li);
      el("span", {class: "kind"}, b, s.kind);
      const where = s.start === s.end ? `at ${fmt(s.start)}` : `${fmt(s.start)}..${fmt(s.end)}`;
      el("span", {}, b, ` ${where} ${UNIT}${s.replica === null ? "" : ", replica " + s.replica}: `);
      el("span", {class: "note"}, b, s.note);
      el("div", {class: "message"}, li, s.message);
      b.onclick = () => showIncident(i);
    });
  }

  function showIncident(i) {
    const s = DATA.variants[state.variant].incidents[i];
    state.incident = i;
    state.search = null;
    if (s.replica !== null) state.replica = s.replica;
    const pad = Math.max((s.end - s.start) * 0.05, runEnd() * 0.002);
    state.x0 = s.start - pad;
    state.x1 = s.end + pad;
    refresh();
    document.getElementById("columns").scrollIntoView({block: "start"});
  }

  async function search(id) {
    if (!id) { state.search = null; render(); return; }
    const d = await load(state.variant);
    const r = d.byId.get(id);
    if (r === undefined) { state.message = `no request ${id} in ${d.meta.name}`; render(); return; }
    state.search = id;
    state.incident = null;
    if (d.requests.replica && d.requests.replica[r] >= 0) state.replica = d.requests.replica[r];  // -1: never routed
    const a = d.requests.arrival[r], e = d.ends[r];
    const pad = Math.max((e - a) * 0.1, runEnd() * 0.001);
    state.x0 = a - pad;
    state.x1 = e + pad;
    refresh();
  }

  function resetZoom() { state.x0 = 0; state.x1 = runEnd(); render(); }
  function zoomBy(f, at) {
    const c = at === undefined ? (state.x0 + state.x1) / 2 : at;
    const w = Math.max((state.x1 - state.x0) * f, runEnd() * 1e-7);
    state.x0 = c - (c - state.x0) * (w / (state.x1 - state.x0));
    state.x1 = state.x0 + w;
    render();
  }

  function refresh() {
    pick.value = state.variant;
    pickCompare.value = state.compare;
    const v = DATA.variants[state.variant];
    pickReplica.textContent = "";
    v.replicas.forEach((r, i) => el("option", {value: i}, pickReplica, `${r.replica}`));
    pickReplica.value = Math.min(state.replica, v.replicas.length - 1);
    pickReplica.disabled = v.replicas.length < 2;
    summaryTable();
    incidentList();
    render();
  }

  // -- drawing ------------------------------------------------------------------------
  let pending = null;
  function render() {
    if (!pending) pending = new Promise((resolve) => requestAnimationFrame(() => {
      pending = null;
      draw().then(resolve);
    }));
    return pending;
  }

  async function draw() {
    windowBox.value = `${fmt(state.x0)}..${fmt(state.x1)}`;
    const shown = [state.variant];
    if (state.compare >= 0 && state.compare !== state.variant) shown.push(state.compare);
    const loaded = await Promise.all(shown.map(load));
    messageBox.textContent = state.message;
    state.message = "";
    columnsBox.className = "columns" + (shown.length > 1 ? " two" : "");
    columnsBox.textContent = "";
    const width = Math.max(320, Math.floor((columnsBox.clientWidth - (shown.length - 1) * 16) / shown.length));
    loaded.forEach((d, k) => drawColumn(d, shown[k], k > 0, width));
    drawHistograms(loaded);
    if (!document.body.dataset.ready) document.body.dataset.readyMs = performance.now().toFixed(1);
    document.body.dataset.ready = "1";
  }

  function drawColumn(d, index, isCompare, width) {
    const col = el("div", {class: "column" + (isCompare ? " compare" : ""), "data-variant": d.meta.name}, columnsBox);
    const h = el("h3", {}, col);
    el("span", {class: "who"}, h, d.meta.name);
    const replica = Math.min(state.replica, d.meta.replicas.length - 1);
    if (d.meta.replicas.length > 1) h.appendChild(document.createTextNode(` (replica ${d.meta.replicas[replica].replica})`));
    const tl = d.timelines[replica];
    if (!tl) {
      el("div", {class: "message"}, col, "no steps.csv (--records summary): no step timeline");
    } else {
      drawTimeline(col, d, tl, width, isCompare ? null : state.incident, replica);
      if (tl.rows_per_point > 1) el("div", {class: "message"}, col,
        `finest detail embedded: ${tl.rows_per_point} steps.csv rows per point (the run is over the report's detail bound)`);
    }
    drawGantt(col, d, width, isCompare, replica);
  }

  function xScale(width) {
    const left = 46, right = 8, inner = width - left - right;
    const k = inner / (state.x1 - state.x0);
    return {left, inner, at: (t) => left + (t - state.x0) * k, time: (px) => state.x0 + (px - left) / k};
  }

  function pickLevel(tl, width) {
    // the coarsest level with at least a bucket per pixel in the window (else the finest)
    for (let L = tl.levels.length - 1; L > 0; L--) {
      const lv = tl.levels[L];
      const n = lowerBound(lv.t0, state.x1) - lowerBound(lv.t1, state.x0);
      if (n >= width) return lv;
    }
    return tl.levels[0];
  }

  function segments(lv, name, x, sum) {
    // the level's buckets in the window merged per pixel: [xa, xb, lo, hi]
    const lo = sum ? lv.preempted : lv[name + ".lo"], hi = sum ? lv.preempted : lv[name + ".hi"];
    const i0 = Math.max(0, lowerBound(lv.t1, state.x0) - 1), i1 = Math.min(lv.t0.length, lowerBound(lv.t0, state.x1) + 1);
    const out = [];
    let cur = null;
    for (let i = i0; i < i1; i++) {
      const xa = x.at(lv.t0[i]), xb = x.at(lv.t1[i]), px = Math.floor(xa);
      if (cur && px === Math.floor(cur[0])) {
        cur[1] = Math.max(cur[1], xb);
        if (sum) { cur[3] += hi[i]; cur[2] = 0; } else { cur[2] = Math.min(cur[2], lo[i]); cur[3] = Math.max(cur[3], hi[i]); }
      } else {
        cur = [xa, xb, sum ? 0 : lo[i], hi[i]];
        out.push(cur);
      }
    }
    return out;
  }

  function drawTimeline(col, d, tl, width, selected, replica) {
    const x = xScale(width);
    const lv = pickLevel(tl, x.inner);
    const height = 86, gap = 18, axis = 32;
    const total = PANELS.length * (height + gap) + axis;
    const root = svg("svg", {class: "timeline", width, height: total, "data-level": lv.level,
                             "data-variant": d.meta.name}, col);
    const clipId = `clip-${d.meta.name}-${Math.random().toString(36).slice(2)}`.replace(/[^\w-]/g, "_");
    const clip = svg("clipPath", {id: clipId}, svg("defs", {}, root));
    svg("rect", {x: x.left, y: 0, width: x.inner, height: total}, clip);
    const spans = d.meta.incidents.filter((s) => s.replica === null || s.replica === d.meta.replicas[replica].replica);
    PANELS.forEach((panel, p) => {
      const top = p * (height + gap) + 12;
      const g = svg("g", {class: "panel", "data-panel": panel.series[0]}, root);
      svg("text", {class: "panel-title", x: x.left, y: top - 3}, g, panel.title);
      const segs = panel.series.map((name) => segments(lv, name, x, !!panel.sum));
      let ymax = 1;
      segs.forEach((ss) => ss.forEach((s) => { if (s[3] > ymax) ymax = s[3]; }));
      if (panel.pool && tl.num_blocks) ymax = Math.max(ymax, tl.num_blocks);
      if (panel.budget) ymax = Math.max(ymax, 1);
      const y = (v) => top + height - (v / ymax) * height;
      ticks(0, ymax, 3).forEach((t) => {
        svg("line", {class: "grid", x1: x.left, x2: x.left + x.inner, y1: y(t), y2: y(t)}, g);
        svg("text", {x: x.left - 4, y: y(t) + 3, "text-anchor": "end"}, g, fmt(t));
      });
      const plot = svg("g", {class: "plot", "clip-path": `url(#${clipId})`}, g);
      svg("rect", {class: "frame", x: x.left, y: top, width: x.inner, height}, plot).style.fill = "transparent";
      spans.forEach((s) => {
        const i = d.meta.incidents.indexOf(s);
        const xa = x.at(s.start), xb = Math.max(x.at(s.end), xa + 2);
        const band = svg("rect", {class: `incident k-${s.kind}` + (selected === i ? " selected" : ""),
          x: xa, y: top, width: xb - xa, height, "data-kind": s.kind, "data-incident": i}, plot);
        svg("title", {}, band, `${s.kind}: ${s.note}`);
        band.addEventListener("click", () => showIncident(i));
      });
      if (panel.pool && tl.num_blocks) svg("line", {class: "pool", x1: x.left, x2: x.left + x.inner, y1: y(tl.num_blocks), y2: y(tl.num_blocks)}, plot);
      panel.series.forEach((name, k) => {
        const ss = segs[k];
        if (!ss.length) return;
        let path;
        if (panel.sum) {
          path = ss.filter((s) => s[3] > 0).map((s) => `M${(s[0]).toFixed(1)} ${y(0).toFixed(1)}V${y(s[3]).toFixed(1)}`).join("");
        } else {
          path = "";
          for (const run of runs(ss)) path += envelope(run, y);
        }
        svg("path", {class: `series s-${name}`, d: path, "data-series": name, "data-points": ss.length}, plot);
      });
      if (panel.sum && selected !== null && selected !== undefined && spans.includes(d.meta.incidents[selected])) {
        const marks = d.meta.incidents[selected].marks;
        marks.forEach((m) => {
          if (m[0] < state.x0 || m[0] > state.x1) return;
          const mx = x.at(m[0]);
          const tri = svg("path", {class: "mark", d: `M${mx.toFixed(1)} ${top + 7}l-3.5 -7h7z`, "data-request": m[1], "data-what": m[2]}, plot);
          svg("title", {}, tri, `${m[2]} ${m[1]} at ${fmt(m[0])} ${UNIT}`);
        });
      }
      if (p === 0) legend(col, PANELS.flatMap((q) => q.series));
    });
    const axisTop = PANELS.length * (height + gap) + 2;
    const ag = svg("g", {class: "axis"}, root);
    svg("line", {x1: x.left, x2: x.left + x.inner, y1: axisTop, y2: axisTop}, ag);
    const xt = ticks(state.x0, state.x1, Math.max(2, Math.floor(x.inner / 110)));
    xt.forEach((t) => {
      svg("line", {x1: x.at(t), x2: x.at(t), y1: axisTop, y2: axisTop + 4}, ag);
      svg("text", {x: x.at(t), y: axisTop + 14, "text-anchor": "middle"}, ag, tickText(t, xt.step));
    });
    svg("text", {x: x.left + x.inner, y: axisTop + 26, "text-anchor": "end"}, ag, UNIT === "s" ? "time (s)" : "step");
    interact(root, x);
  }

  function runs(ss) {
    // segments split where the engine was idle for over a pixel: no line across the gap
    const out = [];
    let start = 0;
    for (let i = 1; i <= ss.length; i++) {
      if (i === ss.length || ss[i][0] - ss[i - 1][1] > 1.5) { out.push(ss.slice(start, i)); start = i; }
    }
    return out;
  }

  function envelope(ss, y) {
    // a closed band: the maxima left to right, then the minima back (a line when they agree)
    const fwd = ss.map((s) => `L${s[0].toFixed(1)} ${y(s[3]).toFixed(1)}L${Math.max(s[1], s[0] + 1).toFixed(1)} ${y(s[3]).toFixed(1)}`);
    const back = [];
    for (let i = ss.length - 1; i >= 0; i--) {
      const s = ss[i];
      back.push(`L${Math.max(s[1], s[0] + 1).toFixed(1)} ${y(s[2]).toFixed(1)}L${s[0].toFixed(1)} ${y(s[2]).toFixed(1)}`);
    }
    return "M" + fwd.join("").slice(1) + back.join("") + "Z";
  }

  function legend(col, names) {
    if (col.querySelector(".legend")) return;
    const colors = {running: "#0072b2", waiting: "#e69f00", used: "#009e73", cached: "#56b4e9", free: "#999",
      tokens: "#555", prefill: "#cc79a7", recompute: "#d62728", preempted: "#d62728"};
    const box = document.createElement("div");
    box.className = "legend";
    names.forEach((n) => { const s = el("span", {}, box); el("i", {style: `background:${colors[n]}`}, s); s.appendChild(document.createTextNode(n)); });
    const i = el("span", {}, box); el("i", {style: "background:#d62728;opacity:.3"}, i); i.appendChild(document.createTextNode("incident (click)"));
    col.insertBefore(box, col.querySelector("svg.timeline"));
  }

  function interact(root, x) {
    root.addEventListener("wheel", (e) => {
      e.preventDefault();
      const box = root.getBoundingClientRect();
      zoomBy(e.deltaY > 0 ? 1.25 : 0.8, x.time(e.clientX - box.left));
    }, {passive: false});
    root.addEventListener("dblclick", () => resetZoom());
    root.addEventListener("mousedown", (e) => {
      const start = e.clientX, x0 = state.x0, x1 = state.x1, per = (x1 - x0) / x.inner;
      const move = (m) => { const dt = (m.clientX - start) * per; state.x0 = x0 - dt; state.x1 = x1 - dt; render(); };
      const up = () => { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); };
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
    });
  }

  function ganttRows(d, isCompare, replica) {
    const n = d.requests.id.length;
    const want = d.requests.replica ? d.meta.replicas[replica].replica : null;
    const mine = (r) => want === null || d.requests.replica[r] === want;
    if (!isCompare && state.search !== null && d.byId.has(state.search)) {
      const r = d.byId.get(state.search);
      return {rows: [r].concat(overlapping(d, mine, MAX_ROWS - 1, r)), why: `request ${state.search} and those beside it`};
    }
    if (!isCompare && state.incident !== null) {
      const s = d.meta.incidents[state.incident];
      if (s && s.requests.length) {
        const rows = s.requests.map((id) => d.byId.get(id)).filter((r) => r !== undefined).slice(0, MAX_ROWS);
        return {rows, why: `the ${s.kind} incident's requests (${rows.length} of ${s.requests.length})`};
      }
    }
    const rows = overlapping(d, mine, MAX_ROWS, -1);
    return {rows, why: rows.length >= MAX_ROWS ? `the first ${MAX_ROWS} requests in the window (zoom in or search for more)` : "the requests in the window"};
    function overlapping(d, mine, limit, skip) {
      const out = [];
      for (let r = 0; r < n && out.length < limit; r++) {
        if (r === skip || !mine(r)) continue;
        if (d.requests.arrival[r] <= state.x1 && d.ends[r] >= state.x0) out.push(r);
      }
      return out;
    }
  }

  function drawGantt(col, d, width, isCompare, replica) {
    const {rows, why} = ganttRows(d, isCompare, replica);
    el("div", {class: "message"}, col, `Requests: ${why}. Phases: queued, prefill, recompute, decode, preempted, swapped.`);
    const x = xScale(width);
    const rowH = 11, top = 4;
    const root = svg("svg", {class: "gantt", width, height: top + rows.length * rowH + 8, "data-rows": rows.length}, col);
    const clipId = `gclip-${Math.random().toString(36).slice(2)}`;
    svg("rect", {x: x.left, y: 0, width: x.inner, height: top + rows.length * rowH + 8}, svg("clipPath", {id: clipId}, svg("defs", {}, root)));
    const kinds = DATA.kinds, ph = d.phases;
    rows.forEach((r, k) => {
      const id = d.requests.id[r];
      const g = svg("g", {class: "req" + (id === state.search ? " hit" : ""), "data-id": id}, root);
      const y = top + k * rowH;
      svg("text", {x: x.left - 4, y: y + 8, "text-anchor": "end"}, g, id);
      const bars = svg("g", {"clip-path": `url(#${clipId})`}, g);
      for (let p = d.first[r]; p < d.first[r + 1]; p++) {
        if (ph.end[p] < state.x0 || ph.start[p] > state.x1) continue;
        const xa = Math.max(x.at(ph.start[p]), x.left - 2), xb = Math.min(x.at(ph.end[p]), x.left + x.inner + 2);
        const kind = kinds[ph.kind[p]];
        const rect = svg("rect", {class: `ph ph-${kind}`, x: xa.toFixed(1), y: y + 1, width: Math.max(1, xb - xa).toFixed(1), height: rowH - 2, "data-kind": kind}, bars);
        svg("title", {}, rect, `${id} ${kind} ${fmt(ph.start[p])}..${fmt(ph.end[p])} ${UNIT}`);
      }
    });
    interact(root, x);
  }

  function drawHistograms(loaded) {
    histBox.textContent = "";
    [["ttft", "TTFT"], ["tpot", "TPOT"], ["e2e", "end-to-end latency"]].forEach(([key, title]) => {
      const sets = loaded.map((d) => Array.from(d.requests[key]).filter((v) => Number.isFinite(v)).sort((a, b) => a - b));
      const all = [].concat(...sets).sort((a, b) => a - b);
      const box = el("div", {class: "hist", "data-metric": key}, histBox);
      el("h3", {}, box, `${title} (${UNIT})`);
      if (!all.length) { el("div", {class: "message"}, box, "no values"); return; }
      const hi = all[Math.min(all.length - 1, Math.floor(all.length * 0.995))] || all[all.length - 1] || 1;
      const bins = 40, w = 300, h = 110, left = 36;
      const root = svg("svg", {width: w + left + 8, height: h + 30}, box);
      const counts = sets.map((vals) => {
        const c = new Array(bins).fill(0);
        vals.forEach((v) => { c[Math.min(bins - 1, Math.floor((v / (hi || 1)) * bins))]++; });
        return c.map((n) => n / Math.max(1, vals.length));
      });
      const top = Math.max(...counts.flat(), 1e-9);
      counts.forEach((c, k) => c.forEach((n, i) => {
        if (!n) return;
        const bh = (n / top) * h;
        svg("rect", {class: "bar" + (k ? " other" : ""), x: left + (i * w) / bins, y: 4 + h - bh, width: w / bins - 1, height: bh}, root);
      }));
      const ag = svg("g", {class: "axis"}, root);
      svg("line", {x1: left, x2: left + w, y1: h + 4, y2: h + 4}, ag);
      ticks(0, hi, 4).forEach((t) => {
        svg("text", {x: left + (t / hi) * w, y: h + 17, "text-anchor": "middle"}, ag, fmt(t));
      });
      svg("text", {x: left - 4, y: 12, "text-anchor": "end"}, ag, `${fmt(top * 100)}%`);
      const names = loaded.map((d, k) => `${d.meta.name}${k ? " (outline)" : ""}: p50 ${fmt(quantile(sets[k], 0.5))}, p99 ${fmt(quantile(sets[k], 0.99))}, n ${sets[k].length}`);
      el("div", {class: "message"}, box, names.join("; ") + ` (last bin: ${fmt(hi)} and above)`);
    });
  }
  function quantile(sorted, q) {
    if (!sorted.length) return null;
    const at = (sorted.length - 1) * q, i = Math.floor(at);
    return i + 1 < sorted.length ? sorted[i] + (sorted[i + 1] - sorted[i]) * (at - i) : sorted[i];
  }

  // -- start --------------------------------------------------------------------------
  state.x0 = 0;
  state.x1 = runEnd();
  window.kvschedReport = {
    state,
    render,
    zoom(x0, x1) { state.x0 = x0; state.x1 = x1; return render(); },
    showIncident(i) { showIncident(i); return render(); },
    search(id) { return search(id).then(() => render()); },
    compare(i) { state.compare = i; refresh(); return render(); },
    variant(i) { state.variant = i; state.replica = 0; state.incident = null; refresh(); return render(); },
  };
  window.addEventListener("resize", () => render());
  refresh();
})();
