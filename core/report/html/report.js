// report.js: the HTML report's viewer. The page holds one or more reports of schema tracepool.report/1
// (docs/report-schema.md) as JSON, one per process (a merged report holds one per rank), and draws
// them with no library and no network: a flame graph (icicle) on a canvas, a timeline in SVG, and
// tables in the DOM. Text from a report only ever reaches the page through textContent.
"use strict";

(function () {
  const started = performance.now();
  const $ = (id) => document.getElementById(id);

  // ---- Helpers ---------------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  function bytes(n) {
    if (n == null || !isFinite(n)) return "?";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0;
    let v = Math.abs(n);
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return (n < 0 ? "-" : "") + (u === 0 ? String(v) : v.toFixed(2)) + " " + units[u];
  }

  const count = (n) => (n == null ? "?" : Number(n).toLocaleString("en-US"));
  const percent = (part, whole) => (whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "");
  const basename = (path) => (path ? String(path).replace(/^.*\//, "") : "");

  // A frame as one line: "function (file:line)"; what the report could not name says so.
  function frameText(f, full) {
    const file = full ? f.file : basename(f.file);
    if (f.kind === "python") return (f.function || "??") + " (" + (file || "?") + ":" + (f.line ?? "?") + ")";
    let where = file ? " (" + file + (f.line != null ? ":" + f.line : "") + ")" : "";
    if (!where && f.module) where = " [" + (full ? f.module : basename(f.module)) + "]";
    return (f.function && f.function !== "??" ? f.function : f.address || "??") + where;
  }

  // What ran the program rather than being it: runpy and `python -m tracepool run` itself.
  const LAUNCHER = /^<frozen |\/tracepool\/(_cli|__main__)\.py$|\/runpy\.py$/;
  // Python's own library and installed packages (torch's modules, say): code the user did not write.
  const LIBRARY = /\/(site|dist)-packages\/|\/lib\/python\d[\d.]*\/|^<frozen /;
  const isLibrary = (f) => f.kind === "python" && LIBRARY.test(f.file || "");

  // The frames a reader reads, innermost first: the interpreter's own C frames never, nor the
  // launcher's frames outside the program; with `pythonOnly`, the Python frames alone where a stack
  // has any.
  function readableFrames(frames, pythonOnly) {
    let kept = (frames || []).filter((f) => !f.interpreter);
    let outer = kept.length;
    while (outer > 1 && kept[outer - 1].kind === "python" && LAUNCHER.test(kept[outer - 1].file || "")) outer--;
    kept = kept.slice(0, outer);
    if (!pythonOnly) return kept;
    // The user's own Python lines, and the innermost frame (where in a library the memory was asked).
    const innermost = kept.findIndex((f) => f.kind === "python");
    const py = kept.filter((f, i) => f.kind === "python" && (!isLibrary(f) || i === innermost));
    return py.length ? py : kept;
  }

  // The lines a site is known by: its innermost readable frames (Python ones where it has any),
  // each caller after a "←", a file named once while it stays the same.
  function siteTitle(frames, most) {
    let kept = readableFrames(frames, true);
    // Where the user's code asked first, then the library line that allocated.
    const own = kept.findIndex((f) => !isLibrary(f));
    if (own > 0) kept = kept.slice(own).slice(0, (most || 4) - 1).concat([{ via: kept[0] }]);
    kept = kept.slice(0, most || 4);
    if (!kept.length) return "(no call site known)";
    let file = null;
    return kept.map((f) => {
      if (f.via) return "· via " + frameText(f.via, false);
      const same = f.file && f.file === file;
      file = f.file;
      if (!same) return frameText(f, false);
      return (f.function || "??") + " (:" + (f.line ?? "?") + ")";
    }).join(" ← ").replace(" ← · via", " · via");
  }

  function showError(message) {
    const box = $("error");
    box.hidden = false;
    box.textContent = (box.textContent ? box.textContent + "\n" : "") + message;
  }

  // ---- The data --------------------------------------------------------------------------------

  let reports;
  try {
    reports = JSON.parse($("tracepool-data").textContent);
    if (!Array.isArray(reports)) reports = [reports];
  } catch (e) {
    showError("This page holds no readable report: " + e.message);
    reports = [];
  }

  function rankName(r, i) {
    const p = r.process || {};
    if (p.rank != null) return "rank " + p.rank;
    return reports.length > 1 ? "process " + (p.pid ?? i) : "this process";
  }

  // What the page shows now: one report (or every report, merged) and one device (or all).
  const state = { report: reports.length > 1 ? -1 : 0, device: -1, flameKind: "live", pythonOnly: true,
                  search: "", zoom: null, table: "live", sort: { key: "bytes", dir: -1 }, open: new Set(),
                  shown: 200 };

  function chosenReports() {
    return state.report < 0 ? reports.map((r, i) => [r, i]) : [[reports[state.report], state.report]];
  }

  // A site's bytes and blocks on the chosen device: its by_device share, or all of it where the
  // report has one device only (or predates by_device, which the caption says).
  function onDevice(site, r) {
    if (state.device < 0) return { bytes: site.bytes, blocks: site.blocks };
    const shares = site.by_device;
    if (shares && shares.length) {
      const s = shares.find((d) => d.device === state.device);
      return s ? { bytes: s.bytes, blocks: s.blocks } : null;
    }
    return (r.devices || []).length <= 1 ? { bytes: site.bytes, blocks: site.blocks } : null;
  }

  // Every entry of one list ("leaks", "cached", ...) of the chosen reports, with its figures on the
  // chosen device and the report it came from.
  function entries(list) {
    const out = [];
    for (const [r, ri] of chosenReports()) {
      for (const [index, s] of (r[list] || []).entries()) {
        const share = list === "leaks" || list === "cached" ? onDevice(s, r) : { bytes: s.bytes, blocks: s.blocks };
        if (!share || share.bytes <= 0 && share.blocks <= 0) continue;
        if (list === "pools" && state.device >= 0 && s.device !== state.device) continue;
        out.push({ s, r, ri, index, bytes: share.bytes, blocks: share.blocks });
      }
    }
    return out;
  }

  function devicesOf(r) { return (r.devices || []).map((d) => d.device); }

  // What a device is called: CUDA's name for it, or the host backend's emulated device.
  const deviceName = (d) => (reports.length && reports[0].backend === "cuda" ? "cuda:" : "device ") + d;

  // ---- Header and views ------------------------------------------------------------------------

  function drawHeader() {
    if (!reports.length) return;
    const r = reports[0];
    const when = r.time_ns ? new Date(r.time_ns / 1e6).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "";
    const reason = { exit: "at exit", demand: "on demand", oom: "at an out-of-memory error" }[r.reason] || r.reason;
    const who = reports.length > 1 ? reports.length + " processes" :
      (r.process ? "pid " + r.process.pid + " on " + r.process.host + (r.process.rank != null ? ", rank " +
        r.process.rank + " of " + r.process.world_size : "") : "");
    const cap = r.capture || {};
    $("subtitle").textContent = [reason, when, who, r.backend + " backend",
      "capture " + cap.mode + (cap.sample_bytes ? ", sampled every " + bytes(cap.sample_bytes) + " (figures estimated)" : "")]
      .filter(Boolean).join(" · ");
    const nav = $("views");
    nav.replaceChildren();
    if (reports.length > 1) {
      nav.append(el("span", { class: "label", text: "process:" }));
      const all = el("button", { type: "button", text: "all ranks", "data-report": "-1" });
      nav.append(all);
      reports.forEach((rep, i) => nav.append(el("button", { type: "button", text: rankName(rep, i), "data-report": String(i) })));
    }
    const devices = new Set();
    reports.forEach((rep) => devicesOf(rep).forEach((d) => devices.add(d)));
    if (devices.size > 1) {
      nav.append(el("span", { class: "label", text: "  device:" }));
      nav.append(el("button", { type: "button", text: "all", "data-device": "-1" }));
      [...devices].sort((a, b) => a - b).forEach((d) =>
        nav.append(el("button", { type: "button", text: deviceName(d), "data-device": String(d) })));
    }
    nav.addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      if (b.dataset.report != null) state.report = Number(b.dataset.report);
      if (b.dataset.device != null) state.device = Number(b.dataset.device);
      state.zoom = null;
      state.open.clear();
      drawAll();
    });
    $("footer").textContent = "tracepool report (schema " + (r.schema || "?") + "), " + reports.length +
      (reports.length > 1 ? " reports" : " report") + ". Everything on this page is in this one file; it loads nothing.";
  }

  function markViews() {
    for (const b of $("views").querySelectorAll("button")) {
      const on = b.dataset.report != null ? Number(b.dataset.report) === state.report
                                           : Number(b.dataset.device) === state.device;
      b.classList.toggle("on", on);
    }
  }

  // ---- Device cards: nvidia-smi's memory, by what holds it -------------------------------------

  function stat(r, device, key) {
    const s = (r.stats || {})[String(device)] || {};
    return s[key + ".all.current"] ?? s[key] ?? 0;
  }

  function deviceCard(r, ri, d) {
    const allocated = stat(r, d.device, "allocated_bytes");
    const reserved = stat(r, d.device, "reserved_bytes");
    const peak = ((r.stats || {})[String(d.device)] || {})["allocated_bytes.all.peak"];
    const cached = Math.max(0, reserved - allocated);
    const title = (reports.length > 1 ? rankName(r, ri) + ", " : "") + deviceName(d.device);
    const card = el("div", { class: "card" }, el("h3", { text: title }));
    const used = d.used_bytes || 0;
    const total = d.total_bytes || 0;
    const scale = Math.max(total, used, reserved, 1);
    let others = 0;
    for (const p of d.processes || []) if (p.pid !== (r.process || {}).pid && p.used_bytes != null) others += p.used_bytes;
    const outside = Math.max(0, (used ? used : reserved) - reserved - others);
    const parts = [["live", allocated, "allocated by live blocks"], ["cached", cached, "cached: reserved but free"],
                   ["outside", outside, "outside tracepool in this process and the driver (CUDA context, libraries)"],
                   ["others", others, "other processes"]];
    const bar = el("div", { class: "bar", title: "the device's memory, " + bytes(total || scale) });
    const keys = el("div", { class: "keys" });
    for (const [cls, value, what] of parts) {
      if (value <= 0) continue;
      bar.append(el("span", { class: cls, style: "width:" + (100 * value / scale).toFixed(3) + "%", title: what + ": " + bytes(value) }));
      keys.append(el("span", {}, el("i", { class: cls, style: "background:var(--" + cls + ")" }), what + " " + bytes(value)));
    }
    card.append(bar, keys);
    card.append(el("p", { text: "tracepool: " + bytes(allocated) + " allocated" + (peak != null ? " (peak " + bytes(peak) + ")" : "") +
      ", " + bytes(reserved) + " reserved, " + bytes(d.cached_bytes ?? cached) + " cached (largest free block " +
      bytes(d.largest_free_block) + ")" }));
    if (used) {
      card.append(el("p", { text: "driver: " + bytes(used) + " used of " + bytes(total) + " (what nvidia-smi shows); " +
        bytes(d.outside_bytes ?? Math.max(0, used - reserved)) + " of it outside tracepool's reserve" }));
    } else {
      card.append(el("p", { class: "detail", text: "the driver gave no figure for the whole device" }));
    }
    if (d.processes) {
      const list = d.processes.map((p) => "pid " + p.pid + (p.pid === (r.process || {}).pid ? " (this process)" : "") + ": " +
        (p.used_bytes == null ? "not visible" : bytes(p.used_bytes)));
      card.append(el("p", { text: "by process (NVML's list): " + (list.length ? list.join("; ") : "none listed") }));
    } else if (d.processes_note) {
      card.append(el("p", { class: "detail", text: "by process: " + d.processes_note }));
    }
    return card;
  }

  function drawDevices() {
    const box = $("devices");
    box.replaceChildren();
    for (const [r, ri] of chosenReports())
      for (const d of r.devices || [])
        if (state.device < 0 || d.device === state.device) box.append(deviceCard(r, ri, d));
    if (!box.children.length) box.append(el("p", { class: "detail", text: "no device in this report" }));
  }

  // ---- Flame graph (icicle): memory by call stack, outermost frame on top ----------------------

  const ROW = 18;
  const flame = { root: null, nodes: [], total: 0, drawn: 0, width: 0 };

  function buildFlame() {
    const root = { name: "all " + (state.flameKind === "live" ? "live" : "cached") + " memory", value: 0, children: new Map(),
                   frame: null, growing: false, sites: 0, depth: 0 };
    const list = state.flameKind === "live" ? "leaks" : "cached";
    const byRank = state.report < 0 && reports.length > 1;
    for (const e of entries(list)) {
      let node = root;
      node.value += e.bytes;
      node.sites++;
      const path = readableFrames(e.s.frames, state.pythonOnly).slice().reverse();
      if (byRank) path.unshift({ kind: "rank", function: rankName(e.r, e.ri) });
      for (const f of path) {
        const key = f.kind === "rank" ? f.function : frameText(f, true);
        let child = node.children.get(key);
        if (!child) {
          child = { name: f.kind === "rank" ? f.function : frameText(f, false), key, value: 0, children: new Map(), frame: f,
                    growing: false, sites: 0, parent: node, depth: node.depth + 1 };
          node.children.set(key, child);
        }
        child.value += e.bytes;
        child.sites++;
        if (e.s.growing) child.growing = true;
        node = child;
      }
    }
    flame.root = root;
    flame.total = root.value;
  }

  function matches(node) {
    return state.search && node.key && node.key.toLowerCase().includes(state.search);
  }

  // Bytes under frames that match the search, each site counted once.
  function matchedBytes() {
    if (!state.search) return 0;
    let sum = 0;
    const walk = (n) => {
      if (n !== flame.root && matches(n)) { sum += n.value; return; }
      for (const c of n.children.values()) walk(c);
    };
    walk(flame.root);
    return sum;
  }

  function layoutFlame(width) {
    const nodes = [];
    const focus = state.zoom || flame.root;
    // The focused node's ancestors take the whole width, as the path to it.
    const chain = [];
    for (let n = focus; n; n = n.parent) chain.unshift(n);
    chain.forEach((n, i) => nodes.push({ n, x: 0, w: width, depth: i }));
    const place = (n, x, w, depth) => {
      let cx = x;
      const kids = [...n.children.values()].sort((a, b) => b.value - a.value);
      for (const c of kids) {
        const cw = n.value > 0 ? w * c.value / n.value : 0;
        if (cw >= 0.5) {
          nodes.push({ n: c, x: cx, w: cw, depth });
          place(c, cx, cw, depth + 1);
        }
        cx += cw;
      }
    };
    place(focus, 0, width, chain.length);
    return nodes;
  }

  function flameColor(n) {
    if (matches(n)) return "#c026d3";
    if (!n.frame) return "#c7ccd6";
    if (n.frame.kind === "rank") return "#a8b3c7";
    const h = [...n.key].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7) % 20;
    if (n.growing && state.flameKind === "live") return "hsl(" + (0 + h / 2) + ",75%," + (58 + h / 2) + "%)";
    return n.frame.kind === "python" ? "hsl(" + (28 + h) + ",85%," + (68 + h / 4) + "%)"
                                     : "hsl(" + (205 + h) + ",60%," + (72 + h / 4) + "%)";
  }

  function drawFlame() {
    buildFlame();
    const canvas = $("flame-canvas");
    const width = Math.max(320, $("flame-box").clientWidth);
    const nodes = layoutFlame(width);
    const depth = nodes.reduce((m, v) => Math.max(m, v.depth), 0) + 1;
    const height = Math.max(ROW * 3, depth * ROW);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "12px 'DejaVu Sans Mono', Menlo, monospace";
    ctx.textBaseline = "middle";
    const charWidth = ctx.measureText("M").width || 7;
    for (const v of nodes) {
      const y = v.depth * ROW;
      ctx.fillStyle = flameColor(v.n);
      ctx.fillRect(v.x, y, Math.max(0.5, v.w - 1), ROW - 1);
      if (v.w > charWidth * 4) {
        const label = v.n === flame.root ? v.n.name + " " + bytes(v.n.value) : v.n.name;
        const fit = Math.floor((v.w - 6) / charWidth);
        ctx.fillStyle = matches(v.n) ? "#fff" : "#1d2330";
        ctx.fillText(label.length > fit ? label.slice(0, Math.max(0, fit - 1)) + "…" : label, v.x + 3, y + ROW / 2);
      }
    }
    flame.nodes = nodes;
    flame.width = width;
    flame.drawn = nodes.length;
    const matched = matchedBytes();
    $("flame-status").textContent = state.search ? "matched " + bytes(matched) + " (" + percent(matched, flame.total) + ")" :
      (flame.total ? bytes(flame.total) + " in " + count(flame.root.sites) + (flame.root.sites === 1 ? " site" : " sites") : "");
    if (!flame.total)
      $("flame-detail").textContent = "No " + (state.flameKind === "live" ? "live" : "cached") + " memory here.";
    else if (!$("flame-detail").dataset.kept)
      $("flame-detail").textContent = "Wider is more memory; the top row is the outermost frame. Red: a growing site's path. " +
        "Click a frame to zoom into it, the top rows to go back.";
  }

  function nodeAt(ev) {
    const rect = $("flame-canvas").getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const depth = Math.floor(y / ROW);
    return flame.nodes.find((v) => v.depth === depth && x >= v.x && x < v.x + v.w) || null;
  }

  function describeNode(n) {
    const lines = [n === flame.root ? n.name : n.frame && n.frame.kind !== "rank" ? frameText(n.frame, true) : n.name];
    if (n.frame && n.frame.module && n.frame.kind === "native") lines.push(n.frame.module);
    lines.push(bytes(n.value) + " (" + percent(n.value, flame.total) + " of " + bytes(flame.total) + "), " + count(n.sites) +
      (n.sites === 1 ? " site" : " sites") + (n.growing && state.flameKind === "live" ? ", growing" : ""));
    return lines.join("\n");
  }

  function wireFlame() {
    const canvas = $("flame-canvas"), tip = $("flame-tip");
    canvas.addEventListener("mousemove", (ev) => {
      const v = nodeAt(ev);
      if (!v) { tip.hidden = true; return; }
      tip.hidden = false;
      tip.textContent = describeNode(v.n);
      const box = $("flame-box").getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - box.left + 12, box.width - 320) + "px";
      tip.style.top = (ev.clientY - box.top + 14) + "px";
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const v = nodeAt(ev);
      if (!v) return;
      state.zoom = v.n === flame.root || v.n === state.zoom ? v.n.parent || null : v.n;
      if (state.zoom === flame.root) state.zoom = null;
      $("flame-detail").textContent = describeNode(v.n).replace(/\n/g, " · ");
      $("flame-detail").dataset.kept = "1";
      drawFlame();
    });
    const kind = (k) => () => {
      state.flameKind = k;
      state.zoom = null;
      $("flame-live").classList.toggle("on", k === "live");
      $("flame-cached").classList.toggle("on", k === "cached");
      delete $("flame-detail").dataset.kept;
      drawFlame();
    };
    $("flame-live").addEventListener("click", kind("live"));
    $("flame-cached").addEventListener("click", kind("cached"));
    $("flame-python").addEventListener("change", (ev) => { state.pythonOnly = ev.target.checked; state.zoom = null; drawFlame(); });
    $("flame-search").addEventListener("input", (ev) => { state.search = ev.target.value.trim().toLowerCase(); drawFlame(); });
    $("flame-reset").addEventListener("click", () => { state.zoom = null; delete $("flame-detail").dataset.kept; drawFlame(); });
    let resize = null;
    window.addEventListener("resize", () => { clearTimeout(resize); resize = setTimeout(drawFlame, 100); });
  }

  // ---- Timeline: allocated, reserved and the top sites' live bytes at each mark -----------------

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  const SITE_COLORS = ["#d0342c", "#e8702a", "#b8860b", "#9c2f6e", "#2a9d8f", "#577590", "#6a4c93", "#8d6e63"];

  // The series of one report: points {t (ns), live, reserved, label, auto} from its marks, then the
  // report itself; and the lines of its sites (growing first) over the marks they were kept at.
  function seriesOf(r) {
    const marks = (r.marks || []).map((m, i) => ({ t: m.time_ns, live: m.live_bytes, reserved: m.reserved_bytes,
                                                  label: m.label, auto: false, i }));
    const autos = (r.auto_marks || []).map((m, i) => ({ t: m.time_ns, live: m.live_bytes, reserved: m.reserved_bytes,
                                                       label: m.label, auto: true, i }));
    const points = marks.concat(autos).sort((a, b) => a.t - b.t);
    let live = 0, reserved = 0;
    for (const d of r.devices || []) { live += stat(r, d.device, "requested_bytes"); reserved += stat(r, d.device, "reserved_bytes"); }
    if (r.time_ns) points.push({ t: r.time_ns, live, reserved, label: "report (" + r.reason + ")", auto: false, end: true });
    const sites = [];
    for (const s of r.leaks || []) {
      const own = (s.live_at_marks || []).length === marks.length && marks.length >= 2;
      const auto = (s.live_at_auto_marks || []).length === autos.length && autos.length >= 2;
      if (!own && !auto) continue;
      const values = own ? s.live_at_marks.map((v, i) => [marks[i].t, v]) : s.live_at_auto_marks.map((v, i) => [autos[i].t, v]);
      if (r.time_ns) values.push([r.time_ns, s.bytes]);
      sites.push({ s, values, growing: s.growing });
    }
    sites.sort((a, b) => (b.growing - a.growing) || (b.s.bytes - a.s.bytes));
    return { points, sites: sites.slice(0, 8) };
  }

  function drawTimeline() {
    const box = $("timeline-box"), legend = $("timeline-legend");
    box.replaceChildren();
    legend.replaceChildren();
    if (state.report < 0 && reports.length > 1) {
      box.append(el("p", { class: "detail", text: "Choose one process above for its timeline." }));
      return;
    }
    const r = reports[state.report];
    const { points, sites } = seriesOf(r);
    if (points.length < 2) {
      box.append(el("p", { class: "detail", text: "No marks were made, so there is nothing over time: call tracepool.mark() at " +
        "each epoch, or let automatic marks run (auto_mark_ms in TRACEPOOL_CONF; tracepool.torch marks optimizer steps)." }));
      return;
    }
    const width = Math.max(480, box.clientWidth), height = 280, left = 78, right = 16, top = 12, bottom = 34;
    const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
    let most = 1;
    for (const p of points) most = Math.max(most, p.live, p.reserved ?? 0);
    for (const l of sites) for (const [, v] of l.values) most = Math.max(most, v);
    const x = (t) => left + (width - left - right) * (t - t0) / (t1 - t0);
    const y = (v) => top + (height - top - bottom) * (1 - v / most);
    const root = svg("svg", { viewBox: "0 0 " + width + " " + height, width, height, role: "img",
                              "aria-label": "allocated, reserved and per-site live bytes over time" });
    for (let i = 0; i <= 4; i++) {
      const v = most * i / 4;
      root.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
      const label = svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" });
      label.textContent = bytes(v);
      root.append(label);
    }
    const seconds = (t1 - t0) / 1e9;
    const [unit, per] = seconds < 1 ? ["ms", 1e3] : seconds < 600 ? ["s", 1] : seconds < 36000 ? ["min", 1 / 60] : ["h", 1 / 3600];
    for (let i = 0; i <= 5; i++) {
      const t = t0 + (t1 - t0) * i / 5;
      const label = svg("text", { x: x(t), y: height - 14, "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle" });
      const step = seconds * per / 5;
      label.textContent = (step * i).toFixed(Math.min(3, Math.max(0, 1 - Math.floor(Math.log10(step))))) + " " + unit;
      root.append(label);
    }
    // The program's marks as ticks, named where there is room.
    let lastLabelX = -1e9;
    for (const p of points) {
      if (p.auto || p.end) continue;
      root.append(svg("line", { x1: x(p.t), x2: x(p.t), y1: top, y2: height - bottom, stroke: "#d5d9e2", "stroke-dasharray": "2,3" }));
      if (x(p.t) - lastLabelX > 70) {
        const label = svg("text", { x: x(p.t) + 2, y: top + 10 });
        label.textContent = p.label;
        root.append(label);
        lastLabelX = x(p.t);
      }
    }
    const line = (values, color, widthPx, dash, name) => {
      const d = values.map(([t, v], i) => (i ? "L" : "M") + x(t).toFixed(1) + "," + y(v).toFixed(1)).join("");
      const path = svg("path", { d, fill: "none", stroke: color, "stroke-width": widthPx, "data-series": name });
      if (dash) path.setAttribute("stroke-dasharray", dash);
      root.append(path);
    };
    const reservedPoints = points.filter((p) => p.reserved != null && p.reserved >= 0).map((p) => [p.t, p.reserved]);
    if (reservedPoints.length >= 2) line(reservedPoints, "#8a94a6", 2, "6,3", "reserved");
    line(points.map((p) => [p.t, p.live]), "#3b6fd8", 2.5, null, "allocated");
    const key = (color, text, cls, dash) => legend.append(el("span", { class: cls || "" },
      el("i", { style: "background:" + color + (dash ? ";height:2px;border-top:1px dashed " + color : "") }), text));
    key("#3b6fd8", "allocated (requested bytes live, all devices)");
    if (reservedPoints.length >= 2) key("#8a94a6", "reserved (what nvidia-smi counts of tracepool)", "", true);
    else key("#8a94a6", "reserved: not recorded at these marks (a report made before it was)", "");
    sites.forEach((l, i) => {
      const color = l.growing ? SITE_COLORS[i % 4] : SITE_COLORS[4 + (i % 4)];
      line(l.values, color, l.growing ? 2 : 1.2, l.growing ? null : "3,2", "site");
      key(color, (l.growing ? "GROWING " : "") + siteTitle(l.s.frames, 3) + " " + bytes(l.s.bytes), l.growing ? "grow" : "");
    });
    // A cursor that reads the figures at the nearest point.
    const cursor = svg("line", { y1: top, y2: height - bottom, stroke: "#1d2330", "stroke-width": 0.6, visibility: "hidden" });
    const readout = svg("text", { x: left + 4, y: height - bottom - 6 });
    root.append(cursor, readout);
    root.addEventListener("mousemove", (ev) => {
      const rect = root.getBoundingClientRect();
      const px = (ev.clientX - rect.left) * width / rect.width;
      let best = points[0];
      for (const p of points) if (Math.abs(x(p.t) - px) < Math.abs(x(best.t) - px)) best = p;
      cursor.setAttribute("x1", x(best.t));
      cursor.setAttribute("x2", x(best.t));
      cursor.setAttribute("visibility", "visible");
      readout.textContent = best.label + (best.auto ? " (automatic)" : "") + ": allocated " + bytes(best.live) +
        (best.reserved != null && best.reserved >= 0 ? ", reserved " + bytes(best.reserved) : "");
    });
    box.append(root);
    if (sites.length === 0)
      legend.append(el("span", { class: "detail", text: "(no site has a series over these marks)" }));
  }

  // ---- Tables ----------------------------------------------------------------------------------

  const TABLES = {
    live: { title: "Live", list: "leaks", note: (r) => r.reason === "exit" ?
      "Leaked: memory still allocated at exit, by call site." : "Live: memory allocated now, by call site." },
    growing: { title: "Growing", list: "leaks", filter: (e) => e.s.growing,
      note: (r) => "Sites whose live memory grew across the " + (r.growth_basis === "automatic marks" ? "automatic marks" : "marks") +
        (r.growth_basis === "none" ? " (too few marks were made to tell)" : "") + "." },
    retained: { title: "Retained", list: "retained",
      note: () => "Live blocks that outlived marks, by site and the mark before their birth." },
    cached: { title: "Cached", list: "cached",
      note: () => "Reserved but free: the cache (empty_cache gives whole free segments back), by the site that last used it." },
    pools: { title: "Private pools", list: "pools",
      note: () => "Memory of CUDA graphs and memory pools, neither leaked nor cache." },
  };

  const COLUMNS = {
    leaks: [["bytes", "bytes", (e) => e.bytes], ["blocks", "blocks", (e) => e.blocks], ["peak", "peak", (e) => e.s.peak_bytes],
            ["total", "allocated in all", (e) => e.s.total_bytes]],
    retained: [["bytes", "bytes", (e) => e.bytes], ["blocks", "blocks", (e) => e.blocks],
               ["survived", "marks survived", (e) => e.s.marks_survived]],
    cached: [["bytes", "bytes", (e) => e.bytes], ["blocks", "free blocks", (e) => e.blocks],
             ["largest", "largest", (e) => e.s.largest_free_block], ["split", "in partly used segments", (e) => e.s.inactive_split_bytes]],
    pools: [["reserved", "reserved", (e) => e.s.reserved_bytes], ["bytes", "live", (e) => e.bytes],
            ["cached", "free inside", (e) => e.s.cached_bytes]],
  };

  function stackView(e) {
    const box = el("div", { class: "stack" });
    const s = e.s;
    if (s.held_by && s.held_by.length) {
      for (const h of s.held_by)
        box.append(el("div", { class: "holder", text: "held by " + h.holder + ": " + bytes(h.bytes) + " in " + count(h.blocks) +
          " blocks" + (h.example ? ", e.g. " + h.example : "") }));
    }
    if (s.live_at_marks && s.live_at_marks.length)
      box.append(el("div", { text: "live at the marks: " + s.live_at_marks.slice(-12).map(bytes).join("  ") +
        (s.live_at_marks.length > 12 ? "  (last 12 of " + s.live_at_marks.length + ")" : "") }));
    if (s.by_device && s.by_device.length > 1)
      box.append(el("div", { text: "by device: " + s.by_device.map((d) => deviceName(d.device) + " " + bytes(d.bytes)).join(", ") }));
    if (s.born_after_mark !== undefined)
      box.append(el("div", { text: "born after mark: " + (s.born_after_mark ?? "(before the first mark)") }));
    if (s.label) box.append(el("div", { text: s.label + " on device " + s.device + ", created at:" }));
    const frames = (s.frames || []).filter((f) => !f.interpreter);
    if (!frames.length) box.append(el("div", { text: "(no frames: capture was off, or the site table was full)" }));
    for (const f of frames)
      box.append(el("div", { class: f.kind === "python" ? "py" : "native", text: "at " + frameText(f, true) +
        (f.kind === "native" && f.module && f.file ? "  [" + basename(f.module) + "]" : "") + (f.borrowed ? "  (borrowed)" : "") }));
    if (s.sites && s.sites.length) {
      box.append(el("div", { text: "its live blocks come from:" }));
      for (const p of s.sites) box.append(el("div", { text: "  " + bytes(p.bytes) + " at " + siteTitle(p.frames) }));
    }
    return box;
  }

  function drawTable() {
    const spec = TABLES[state.table];
    const tabs = $("table-tabs");
    for (const b of tabs.querySelectorAll("button")) b.classList.toggle("on", b.dataset.table === state.table);
    let rows = entries(spec.list);
    if (spec.filter) rows = rows.filter(spec.filter);
    const columns = COLUMNS[spec.list];
    const sortBy = columns.find((c) => c[0] === state.sort.key) || columns[0];
    rows.sort((a, b) => state.sort.dir * ((sortBy[2](a) ?? 0) - (sortBy[2](b) ?? 0)) || a.index - b.index);
    const first = chosenReports()[0];
    $("table-note").textContent = (first ? spec.note(first[0]) : "") + " " + count(rows.length) + " rows" +
      (state.device >= 0 ? " with memory on " + deviceName(state.device) + " (bytes and blocks on it; the other figures are " +
       "of every device)" : "") + ". Click a row for its whole stack, a heading to sort.";
    const multi = state.report < 0 && reports.length > 1;
    const head = el("tr", {}, el("th", { text: "#" }));
    for (const [key, title] of columns) {
      const th = el("th", { text: title, "data-key": key });
      if (key === sortBy[0]) th.setAttribute("aria-sort", state.sort.dir < 0 ? "descending" : "ascending");
      head.append(th);
    }
    if (multi) head.append(el("th", { text: "process" }));
    head.append(el("th", { text: spec.list === "pools" ? "pool" : "site" }));
    head.addEventListener("click", (ev) => {
      const key = ev.target.dataset && ev.target.dataset.key;
      if (!key) return;
      state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : -1 };
      drawTable();
    });
    const body = el("tbody");
    const span = columns.length + (multi ? 3 : 2);
    rows.slice(0, state.shown).forEach((e, i) => {
      const id = state.table + ":" + e.ri + ":" + e.index;
      const site = el("td", { class: "site" });
      if (spec.list === "pools") site.append(e.s.label + " ");
      site.append(siteTitle(e.s.frames));
      if (e.s.growing && spec.list === "leaks") site.append(" ", el("span", { class: "badge", text: "GROWING" }));
      if ((e.s.tags || []).length) site.append(" [" + e.s.tags.join("/") + "]");
      if (e.s.held_by && e.s.held_by.length) site.append(el("div", { class: "holder", text: "held by " + e.s.held_by[0].holder }));
      const tr = el("tr", { class: "site-row" + (state.open.has(id) ? " open" : ""), "data-id": id }, el("td", { class: "num", text: String(i + 1) }));
      for (const [key, , value] of columns) {
        const v = value(e);
        tr.append(el("td", { class: "num", text: key === "blocks" || key === "survived" ? count(v) : bytes(v) }));
      }
      if (multi) tr.append(el("td", { text: rankName(e.r, e.ri) }));
      tr.append(site);
      tr.addEventListener("click", () => {
        if (state.open.has(id)) state.open.delete(id); else state.open.add(id);
        drawTable();
      });
      body.append(tr);
      if (state.open.has(id)) body.append(el("tr", { class: "stack-row" }, el("td", { colspan: String(span) }, stackView(e))));
    });
    const table = el("table", {}, el("thead", {}, head), body);
    const box = $("table-box");
    box.replaceChildren(table);
    if (rows.length > state.shown)
      box.append(el("button", { type: "button", class: "more", text: "show all " + count(rows.length) + " rows",
        onclick: () => { state.shown = Infinity; drawTable(); } }));
  }

  function wireTables() {
    const tabs = $("table-tabs");
    for (const [key, spec] of Object.entries(TABLES))
      tabs.append(el("button", { type: "button", text: spec.title, "data-table": key, onclick: () => {
        state.table = key;
        state.sort = { key: COLUMNS[spec.list][0][0], dir: -1 };
        state.shown = 200;
        drawTable();
      } }));
  }

  // ---- Putting it together ---------------------------------------------------------------------

  function drawAll() {
    markViews();
    drawDevices();
    drawFlame();
    drawTimeline();
    drawTable();
  }

  try {
    drawHeader();
    wireFlame();
    wireTables();
    // The growing table first when something grows: that is what the reader came for.
    if (reports.some((r) => (r.leaks || []).some((s) => s.growing))) state.table = "growing";
    if (!reports.some((r) => (r.leaks || []).concat(r.cached || []).some((s) => (s.frames || []).some((f) => f.kind === "python")))) {
      state.pythonOnly = false;
      $("flame-python").checked = false;
    }
    drawAll();
  } catch (e) {
    showError("The report could not be drawn: " + e.message);
    throw e;
  } finally {
    // For tests and the curious: how long the first drawing took, and what it drew.
    window.tracepoolView = { ms: performance.now() - started, state, flame, reports: reports.length };
    document.body.dataset.ready = "1";
  }
})();
