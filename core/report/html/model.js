// model.js: the HTML report's viewer, part 1 of 5: helpers, and the reports the page holds.
//
// The page (report.html) holds one or more reports of schema tracepool.report/1 (docs/report-schema.md)
// as JSON, one per process (a merged page holds one per rank), or a diff (schema tracepool.diff/1) with
// the two reports it compares in its "reports", and draws them with no library and no
// network: a flame graph (icicle) on a canvas (flame.js), a timeline in SVG (timeline.js), and device
// cards and tables in the DOM (tables.js); main.js draws the header and starts it all. The five files
// run as one function, in that order (core/CMakeLists.txt joins them into the page). Text from a report
// only ever reaches the page through textContent.

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

// As the library writes sizes (human_bytes in core/report/wording.h): "24.00 MiB", "512 B".
function bytes(n) {
  if (n == null || !isFinite(n)) return "?";
  const units = ["B", "KiB", "MiB", "GiB"];
  let u = 0;
  let v = Math.abs(n);
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (n < 0 ? "-" : "") + (u === 0 ? String(v) : v.toFixed(2)) + " " + units[u];
}

const count = (n) => (n == null ? "?" : Number(n).toLocaleString("en-US"));
const percent = (part, whole) => (whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "");
const basename = (path) => (path ? String(path).replace(/^.*\//, "") : "");

// A frame as one line, as the library writes it (frame_text in core/report/wording.h): "function
// (file:line)", "function (in libx.so)"; `full`: the whole path. What the report could not name says so.
function frameText(f, full) {
  const file = full ? f.file : basename(f.file);
  if (f.kind === "python") return (f.function || "??") + " (" + (file || "?") + ":" + (f.line ?? "?") + ")";
  let where = file ? " (" + file + (f.line != null ? ":" + f.line : "") + ")" : "";
  if (!where && f.module) where = " (in " + (full ? f.module : basename(f.module)) + ")";
  return (f.function && f.function !== "??" ? f.function : f.address || "??") + where;
}

// Which Python lines are the user's, and which ran the program rather than being it, as the library
// decided (Note [Site titles] in core/report/wording.h): the page keeps no rule of its own.
const isLibrary = (f) => f.kind === "python" && f.library === true;
const isLauncher = (f) => f.kind === "python" && f.launcher === true;

// The frames a reader reads, innermost first: the interpreter's own C frames never, nor the
// launcher's frames outside the program; with `pythonOnly`, the Python frames alone where a stack
// has any.
function readableFrames(frames, pythonOnly) {
  let kept = (frames || []).filter((f) => !f.interpreter);
  let outer = kept.length;
  while (outer > 1 && isLauncher(kept[outer - 1])) outer--;
  kept = kept.slice(0, outer);
  if (!pythonOnly) return kept;
  // The user's own Python lines, and the innermost frame (where in a library the memory was asked).
  const innermost = kept.findIndex((f) => f.kind === "python");
  const py = kept.filter((f, i) => f.kind === "python" && (!isLibrary(f) || i === innermost));
  return py.length ? py : kept;
}

// A site's title, as the library wrote it (Note [Site titles]).
const siteTitle = (site) => site.title || "(no call site recorded)";

function showError(message) {
  const box = $("error");
  box.hidden = false;
  box.textContent = (box.textContent ? box.textContent + "\n" : "") + message;
}

// ---- The data --------------------------------------------------------------------------------

// `change`: a diff's page only (`python -m tracepool diff --format html`): each site's change, listed by
// the "changed" table (tables.js); its two reports are views of their own, "before" and "after".
let reports;
let change = null;
try {
  const data = JSON.parse($("tracepool-data").textContent);
  if (data && !Array.isArray(data) && data.schema === "tracepool.diff/1") {
    change = data;
    reports = data.reports || [];
  } else {
    reports = Array.isArray(data) ? data : [data];
  }
} catch (e) {
  showError("This page holds no readable report: " + e.message);
  reports = [];
}

function rankName(r, i) {
  if (change) return i === 0 ? "before" : "after";
  const p = r.process || {};
  if (p.rank != null) return "rank " + p.rank;
  return reports.length > 1 ? "process " + (p.pid ?? i) : "this process";
}

// What the page shows now: one report (or every report, merged) and one device (or all).
// A diff's two reports are never summed: its page shows the later one, and the change, first.
const state = { report: change ? reports.length - 1 : reports.length > 1 ? -1 : 0, device: -1, flameKind: "live",
                pythonOnly: true, search: "", zoom: null, table: change ? "changed" : "live",
                sort: { key: change ? "" : "bytes", dir: -1 }, open: new Set(), shown: 200 };

function chosenReports() {
  return state.report < 0 ? reports.map((r, i) => [r, i]) : [[reports[state.report], state.report]];
}

// A site's bytes and blocks on the chosen device: its by_device share, or all of it where the
// report has one device only; null where it has none there, or the report predates by_device
// (lacksDeviceShares says so to the reader).
function onDevice(site, r) {
  if (state.device < 0) return { bytes: site.bytes, blocks: site.blocks };
  const shares = site.by_device;
  if (shares && shares.length) {
    const s = shares.find((d) => d.device === state.device);
    return s ? { bytes: s.bytes, blocks: s.blocks } : null;
  }
  return (r.devices || []).length <= 1 ? { bytes: site.bytes, blocks: site.blocks } : null;
}

// Whether a chosen report of several devices has sites without per-device figures (older reports;
// every site of a newer one holds memory on some device), which a device's view cannot place.
function lacksDeviceShares() {
  return state.device >= 0 && chosenReports().some(([r]) => (r.devices || []).length > 1 &&
    (r.leaks || []).concat(r.cached || []).some((s) => !(s.by_device && s.by_device.length)));
}

// Every entry of one list ("leaks", "cached", ...) of the chosen reports, with its figures on the
// chosen device and the report it came from. Retained entries are their leak's blocks by birth and
// have no device figures: in a device's view they are those of the sites holding memory there, whole.
// A pool is its device's, and listed while it holds any memory, live or free.
function entries(list) {
  const out = [];
  for (const [r, ri] of chosenReports()) {
    const leakOf = list === "retained" ? new Map((r.leaks || []).map((s) => [s.site, s])) : null;
    for (const [index, s] of (r[list] || []).entries()) {
      let share = { bytes: s.bytes, blocks: s.blocks };
      if (list === "leaks" || list === "cached") share = onDevice(s, r);
      else if (list === "retained" && state.device >= 0 && !onDevice(leakOf.get(s.site) || s, r)) share = null;
      else if (list === "pools" && state.device >= 0 && s.device !== state.device) share = null;
      const held = list === "pools" ? (s.reserved_bytes || 0) + (s.bytes || 0) : share && (share.bytes || share.blocks);
      if (!share || !held) continue;
      out.push({ s, r, ri, index, bytes: share.bytes, blocks: share.blocks });
    }
  }
  return out;
}

function devicesOf(r) { return (r.devices || []).map((d) => d.device); }

// What a device is called: CUDA's name for it, or the host backend's emulated device.
const deviceName = (d) => (reports.length && reports[0].backend === "cuda" ? "cuda:" : "device ") + d;
