// timeline.js: the HTML report's viewer, part 3 of 5 (model.js says how the parts fit).

// ---- Timeline: allocated, reserved and the top sites' live bytes at each mark -----------------
// With the allocation history (history:N), allocated and reserved come from it, after every event
// (report "timeline", per device); the marks then give the site lines and the ticks.

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// Allocated and reserved per device's history line, when several are drawn.
const DEVICE_COLORS = [["#3b6fd8", "#8a94a6"], ["#1e3f8a", "#5a6478"], ["#2a9d8f", "#7fb8b1"], ["#6a4c93", "#a99bc2"]];

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
  let { points, sites } = seriesOf(r);
  const history = (r.timeline || []).filter((h) => (state.device < 0 || h.device === state.device) && h.points.length);
  // Marks and site lines are of every device: one device's view of several draws its history alone.
  const oneOfSeveral = state.device >= 0 && devicesOf(r).length > 1;
  if (oneOfSeveral) sites = [];
  if (points.length < 2 && !history.length) {
    box.append(el("p", { class: "detail", text: "No marks were made, so there is nothing over time: call tracepool.mark() at " +
      "each epoch, or let automatic marks run (auto_mark_ms in TRACEPOOL_CONF; tracepool.torch marks optimizer steps)." }));
    return;
  }
  const width = Math.max(480, box.clientWidth), height = 280, left = 78, right = 16, top = 12, bottom = 34;
  let t0 = Infinity, t1 = -Infinity;
  let most = 1;
  for (const p of points) {
    t0 = Math.min(t0, p.t);
    t1 = Math.max(t1, p.t);
    if (!history.length) most = Math.max(most, p.live, p.reserved ?? 0);  // else the history's figures
  }
  for (const h of history) {
    t0 = Math.min(t0, h.points[0][0]);
    t1 = Math.max(t1, h.points[h.points.length - 1][0]);
    for (const [, a, res] of h.points) most = Math.max(most, a, res);
  }
  t1 = Math.max(t1, t0 + 1);
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
  const key = (color, text, cls, dash) => legend.append(el("span", { class: cls || "" },
    el("i", { style: "background:" + color + (dash ? ";height:2px;border-top:1px dashed " + color : "") }), text));
  if (history.length) {
    history.forEach((h, i) => {
      const which = history.length > 1 || devicesOf(r).length > 1 ? deviceName(h.device) + " " : "";
      const steps = (k) => h.points.flatMap(([t, ...v], j) => (j ? [[t, h.points[j - 1][k]], [t, v[k - 1]]] : [[t, v[k - 1]]]));
      const [live, held] = DEVICE_COLORS[i % DEVICE_COLORS.length];
      line(steps(2), held, 1.5, "6,3", "reserved");
      line(steps(1), live, 1.5, null, "allocated");
      key(live, which + "allocated (blocks' bytes after each event of the allocation history: " +
        count(r.history_events) + " events, the last " + count(h.points.length) + " points)");
      key(held, which + "reserved (what nvidia-smi counts of tracepool)", "", true);
    });
    if (oneOfSeveral) legend.append(el("span", { class: "detail", text: "(site lines are of every device: choose all)" }));
  } else {
    const reservedPoints = points.filter((p) => p.reserved != null && p.reserved >= 0).map((p) => [p.t, p.reserved]);
    if (reservedPoints.length >= 2) line(reservedPoints, "#8a94a6", 2, "6,3", "reserved");
    line(points.map((p) => [p.t, p.live]), "#3b6fd8", 2.5, null, "allocated");
    key("#3b6fd8", "allocated (requested bytes live at each mark, all devices)");
    if (reservedPoints.length >= 2) key("#8a94a6", "reserved (what nvidia-smi counts of tracepool)", "", true);
    else key("#8a94a6", "reserved: not recorded at these marks (a report made before it was)", "");
  }
  sites.forEach((l, i) => {
    const color = l.growing ? SITE_COLORS[i % 4] : SITE_COLORS[4 + (i % 4)];
    line(l.values, color, l.growing ? 2 : 1.2, l.growing ? null : "3,2", "site");
    key(color, (l.growing ? "GROWING " : "") + siteTitle(l.s) + " " + bytes(l.s.bytes), l.growing ? "grow" : "");
  });
  // A cursor that reads the figures at the nearest point.
  const cursor = svg("line", { y1: top, y2: height - bottom, stroke: "#1d2330", "stroke-width": 0.6, visibility: "hidden" });
  const readout = svg("text", { x: left + 4, y: height - bottom - 6 });
  root.append(cursor, readout);
  root.addEventListener("mousemove", (ev) => {
    const rect = root.getBoundingClientRect();
    const px = (ev.clientX - rect.left) * width / rect.width;
    const near = (t) => Math.abs(x(t) - px);
    let text = null, at = null;
    if (history.length) {  // the drawn device's figures at the nearest event
      const h = history[0];
      let best = h.points[0];
      for (const p of h.points) if (near(p[0]) < near(best[0])) best = p;
      at = best[0];
      text = (history.length > 1 ? deviceName(h.device) + " " : "") + "allocated " + bytes(best[1]) + ", reserved " + bytes(best[2]);
    } else if (points.length) {  // the figures of every device at the nearest mark
      let best = points[0];
      for (const p of points) if (near(p.t) < near(best.t)) best = p;
      at = best.t;
      text = best.label + (best.auto ? " (automatic)" : "") + ": allocated " + bytes(best.live) +
        (best.reserved != null && best.reserved >= 0 ? ", reserved " + bytes(best.reserved) : "");
    }
    if (at == null) return;
    cursor.setAttribute("x1", x(at));
    cursor.setAttribute("x2", x(at));
    cursor.setAttribute("visibility", "visible");
    readout.textContent = text;
  });
  box.append(root);
  if (sites.length === 0)
    legend.append(el("span", { class: "detail", text: "(no site has a series over these marks)" }));
}
