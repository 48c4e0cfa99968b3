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

// Note [Timeline colours]
// Each site's line has a colour of its own, from a palette a reader tells apart at a glance (D3's
// category10 less its blue and grey, which are allocated's and reserved's, and its olive and cyan); the
// growing sites take them first, then the largest. Six lines: more would repeat colours or need shades no
// one tells apart, so the legend counts the other sites with a series, and the tables list them. Growing
// is said by a solid line and the tables' badge, not by a colour.
const SITE_COLORS = ["#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"];

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
  return { points, sites: sites.slice(0, SITE_COLORS.length), more: sites.slice(SITE_COLORS.length) };
}

// Note [Timeline axis]
// The axis spans the data (the marks, the history's events), not the process: it starts at the first of
// them. The report's own point comes after the last, at times long after (the holder search, a program
// that runs on unmarked): on a short run that stretch would squeeze every mark into the first few
// percent of the width, so where it would take more than a quarter of the axis the report sits past a
// break at the right edge, its tick saying how much later it was made. Where the marks' own times are
// very uneven (a burst of marks, then long epochs: the median gap under a fifth of the mean) and there is
// no history, the points are spaced evenly by index instead, and the ticks under them give their times.
const BREAK_WIDTH = 96;  // px past the break, for the report's point and its tick

// A duration as its tick says it: "0", "250 µs", "1.5 s", "48 min".
function duration(ns, unit) {
  const [name, per] = unit || unitOf(ns);
  const v = ns / per;
  return v === 0 ? "0" : (v >= 100 ? v.toFixed(0) : String(Number(v.toPrecision(v >= 10 ? 3 : 2)))) + " " + name;
}
function unitOf(ns) {
  return ns < 1e6 ? ["µs", 1e3] : ns < 1e9 ? ["ms", 1e6] : ns < 600e9 ? ["s", 1e9] : ns < 36000e9 ? ["min", 60e9] : ["h", 3600e9];
}

// x(t) and the ticks under the axis, {x, text, align, pinned}, for points of times t (ns) drawn between
// `left` and `right` (px).
function axisOf(points, history, left, right) {
  const marks = points.filter((p) => !p.end);
  const end = points.find((p) => p.end);
  const data = marks.map((p) => p.t);
  for (const h of history) data.push(h.points[0][0], h.points[h.points.length - 1][0]);
  const first = Math.min(...data), last = Math.max(...data);
  const gaps = marks.slice(1).map((p, i) => p.t - marks[i].t).sort((a, b) => a - b);
  const mean = gaps.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length);
  if (!history.length && gaps.length >= 3 && gaps[gaps.length >> 1] * 5 < mean) {
    const slot = (right - left) / (points.length - 1);
    const knots = points.map((p, i) => [p.t, left + slot * i]);
    const x = (t) => {
      let i = knots.findIndex(([kt]) => kt >= t);
      if (i <= 0) return i === 0 ? knots[0][1] : right;
      const [t0, x0] = knots[i - 1], [t1, x1] = knots[i];
      return x0 + (x1 - x0) * (t - t0) / Math.max(1, t1 - t0);
    };
    const unit = unitOf(points[points.length - 1].t - first);
    const ticks = points.map((p, i) => ({ x: knots[i][1], text: (i ? "+" : "") + duration(p.t - first, unit),
                                          align: i === 0 ? "start" : i === points.length - 1 ? "end" : "middle" }));
    return { x, ticks, byIndex: true };
  }
  const tail = end && end.t > last ? end.t - last : 0;
  const broken = last > first && tail * 3 > last - first;
  const axisRight = broken ? right - BREAK_WIDTH : right;
  const t1 = Math.max(broken ? last : Math.max(last, end ? end.t : last), first + 1);
  const x = (t) => (t > t1 ? right : left + (axisRight - left) * (t - first) / (t1 - first));
  const unit = unitOf(t1 - first);
  const raw = (t1 - first) / unit[1] / 5, magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) * unit[1];
  const ticks = [];
  for (let t = 0; t <= t1 - first + step * 1e-9; t += step)
    ticks.push({ x: x(first + t), text: duration(t, unit), align: t === 0 ? "start" : "middle" });
  if (broken) ticks.push({ x: right, text: "report, " + duration(tail) + " later", align: "end", pinned: true });
  return { x, ticks, breakAt: broken ? axisRight + 14 : null };
}

// Draws labels, {x, text, align, pinned}, from `y`, none overlapping another, the pinned ones always: all
// of them, in up to `rows` rows where it takes more than one; else, in one row, every k-th for the least
// k of 2, 5, 10, 20, 50, ... that fits ("epoch 0", "epoch 5", ...: labels thinned evenly read better than
// ones dropped wherever they collide, or rows of them staggered at random). A label that would cross
// `minX` or `maxX` is moved inside.
function placeLabels(root, items, rows, y, minX, maxX) {
  const GAP = 8, ROW = 12;
  const texts = items.map((it) => {
    const t = svg("text", { class: it.cls || "" });
    t.textContent = it.text;
    root.append(t);
    return t;
  });
  const spans = items.map((it, i) => {
    const w = texts[i].getComputedTextLength();
    let a = it.align === "middle" ? it.x - w / 2 : it.align === "end" ? it.x - 3 - w : it.x + 3;
    if (it.align === "start" && a + w > maxX) a = it.x - 3 - w;  // a mark near the right edge: its label before it
    a = Math.max(minX, Math.min(a, maxX - w));
    return [a, a + w];
  });
  const fit = (k, rows) => {
    const used = Array.from({ length: rows }, () => []);
    const chosen = new Map();
    const order = items.map((it, i) => i).filter((i) => items[i].pinned)
      .concat(items.map((it, i) => i).filter((i) => !items[i].pinned && i % k === 0));
    for (const i of order) {
      const [a, b] = spans[i];
      const row = used.findIndex((r) => r.every(([c, d]) => b + GAP <= c || a >= d + GAP));
      if (row < 0) return null;
      used[row].push(spans[i]);
      chosen.set(i, row);
    }
    return chosen;
  };
  let chosen = fit(1, rows);
  for (let k = 2; !chosen && k < 2 * items.length; k *= String(k)[0] === "2" ? 2.5 : 2) chosen = fit(k, 1);
  chosen = chosen || fit(Infinity, 1) || new Map();
  texts.forEach((t, i) => {
    if (!chosen || !chosen.has(i)) return t.remove();
    t.setAttribute("x", spans[i][0].toFixed(1));
    t.setAttribute("y", y + ROW * chosen.get(i));
  });
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
  let { points, sites, more } = seriesOf(r);
  const history = (r.timeline || []).filter((h) => (state.device < 0 || h.device === state.device) && h.points.length);
  // Marks and site lines are of every device: one device's view of several draws its history alone.
  const oneOfSeveral = state.device >= 0 && devicesOf(r).length > 1;
  if (oneOfSeveral) [sites, more] = [[], []];
  if (points.length < 2 && !history.length) {
    box.append(el("p", { class: "detail", text: "No marks were made, so there is nothing over time: call tracepool.mark() at " +
      "each epoch, or let automatic marks run (auto_mark_ms in TRACEPOOL_CONF; tracepool.torch marks optimizer steps)." }));
    return;
  }
  // Two rows of mark labels above the plots, the time ticks below them. The sites' lines have a plot and a
  // scale of their own under the totals': on the totals' scale a long run's sites lie flat along 0.
  const width = Math.max(480, box.clientWidth), left = 78, right = width - 16, top = 36, bottom = 34;
  const plotHeight = 220, siteTop = top + plotHeight + 30, siteHeight = sites.length ? 120 : 0;
  const height = (sites.length ? siteTop + siteHeight : top + plotHeight) + bottom;
  let most = 1, mostSite = 1;
  if (!history.length) for (const p of points) most = Math.max(most, p.live, p.reserved ?? 0);  // else the history's figures
  for (const h of history) for (const [, a, res] of h.points) most = Math.max(most, a, res);
  for (const l of sites) for (const [, v] of l.values) mostSite = Math.max(mostSite, v);
  const axis = axisOf(points, history, left, right);
  const x = axis.x;
  const y = (v) => top + plotHeight * (1 - v / most);
  const ySite = (v) => siteTop + siteHeight * (1 - v / mostSite);
  const root = svg("svg", { viewBox: "0 0 " + width + " " + height, width, height, role: "img",
                            "aria-label": "allocated, reserved and per-site live bytes over time" });
  box.append(root);  // in the page, so that its labels can be measured
  const grid = (scale, top, steps) => {
    for (let i = 0; i <= steps; i++) {
      const v = top * i / steps;
      root.append(svg("line", { class: "grid", x1: left, x2: right, y1: scale(v), y2: scale(v) }));
      const label = svg("text", { x: left - 6, y: scale(v) + 4, "text-anchor": "end" });
      label.textContent = bytes(v);
      root.append(label);
    }
  };
  grid(y, most, 4);
  if (sites.length) {
    grid(ySite, mostSite, 2);
    const title = svg("text", { x: left + 4, y: siteTop - 8, class: "panel-title" });
    title.textContent = "the sites listed below: their live bytes, on a scale of their own";
    root.append(title);
  }
  placeLabels(root, axis.ticks.map((t) => Object.assign({ cls: "tick" }, t)), 1, height - 14, 0, width);
  if (axis.breakAt != null) {  // the axis break before the report's point: two slanted strokes
    for (const dx of [-3, 3])
      root.append(svg("line", { class: "break", x1: axis.breakAt + dx - 3, x2: axis.breakAt + dx + 3, y1: height - bottom + 6,
                                y2: height - bottom - 6, stroke: "#5d6677", "stroke-width": 1.2 }));
  }
  // The program's marks as ticks, each named where its label fits (Note [Timeline axis]).
  const named = [];
  for (const p of points) {
    if (p.auto || p.end) continue;
    root.append(svg("line", { x1: x(p.t), x2: x(p.t), y1: top - 24, y2: height - bottom, stroke: "#d5d9e2", "stroke-dasharray": "2,3" }));
    named.push({ x: x(p.t), text: p.label, align: "start", cls: "mark-label" });
  }
  placeLabels(root, named, 2, top - 14, left, right);
  const line = (values, color, widthPx, dash, name, scale) => {
    const d = values.map(([t, v], i) => (i ? "L" : "M") + x(t).toFixed(1) + "," + (scale || y)(v).toFixed(1)).join("");
    const path = svg("path", { d, fill: "none", stroke: color, "stroke-width": widthPx, "data-series": name });
    if (dash) path.setAttribute("stroke-dasharray", dash);
    root.append(path);
  };
  const swatch = (color, dash) => el("i", { class: dash ? "dashed" : "", "data-color": color,
                                                   style: (dash ? "border-color:" : "background:") + color });
  const key = (color, text, dash) => legend.append(el("span", {}, swatch(color, dash), text));
  if (history.length) {
    history.forEach((h, i) => {
      const which = history.length > 1 || devicesOf(r).length > 1 ? deviceName(h.device) + " " : "";
      const steps = (k) => h.points.flatMap(([t, ...v], j) => (j ? [[t, h.points[j - 1][k]], [t, v[k - 1]]] : [[t, v[k - 1]]]));
      const [live, held] = DEVICE_COLORS[i % DEVICE_COLORS.length];
      line(steps(2), held, 1.5, "6,3", "reserved");
      line(steps(1), live, 1.5, null, "allocated");
      key(live, which + "allocated (blocks' bytes after each event of the allocation history: " +
        count(r.history_events) + " events, the last " + count(h.points.length) + " points)");
      key(held, which + "reserved (what nvidia-smi counts of tracepool)", true);
    });
    if (oneOfSeveral) legend.append(el("span", { class: "detail", text: "(site lines are of every device: choose all)" }));
  } else {
    const reservedPoints = points.filter((p) => p.reserved != null && p.reserved >= 0).map((p) => [p.t, p.reserved]);
    if (reservedPoints.length >= 2) line(reservedPoints, "#8a94a6", 2, "6,3", "reserved");
    line(points.map((p) => [p.t, p.live]), "#3b6fd8", 2.5, null, "allocated");
    key("#3b6fd8", "allocated (requested bytes live at each mark, all devices)");
    if (reservedPoints.length >= 2) key("#8a94a6", "reserved (what nvidia-smi counts of tracepool)", true);
    else key("#8a94a6", "reserved: not recorded at these marks (a report made before it was)");
  }
  if (axis.byIndex)
    legend.append(el("span", { class: "detail", text: "(the marks' times are uneven: they are spaced evenly, their times under them)" }));
  // The sites' lines: one row each, its colour, bytes and title (Note [Timeline colours]).
  const rows = el("tbody");
  sites.forEach((l, i) => {
    const color = SITE_COLORS[i];
    line(l.values, color, l.growing ? 2 : 1.4, l.growing ? null : "4,3", "site", ySite);
    rows.append(el("tr", {}, el("td", {}, swatch(color, !l.growing)), el("td", { class: "num", text: bytes(l.s.bytes) }),
      el("td", {}, l.growing ? el("span", { class: "badge", text: "GROWING" }) : null), el("td", { class: "site", text: siteTitle(l.s) })));
  });
  if (sites.length) legend.append(el("div", { class: "legend-sites" }, el("table", {}, rows)));
  if (more.length) {
    const growing = more.filter((l) => l.growing).length;
    legend.append(el("span", { class: "detail", text: count(more.length) + " more site" + (more.length === 1 ? "" : "s") +
      " with a series" + (growing ? " (" + count(growing) + " growing)" : "") + " not drawn: the tables below list them" }));
  }
  // A cursor that reads the figures at the nearest point.
  const cursor = svg("line", { y1: top, y2: height - bottom, stroke: "#1d2330", "stroke-width": 0.6, visibility: "hidden" });
  const readout = svg("text", { x: left + 4, y: top + plotHeight - 6 });
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
  if (sites.length === 0)
    legend.append(el("span", { class: "detail", text: "(no site has a series over these marks)" }));
}
