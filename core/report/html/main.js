// main.js: the HTML report's viewer, part 5 of 5 (model.js says how the parts fit): the header, the
// views of ranks and devices, and the first drawing.

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
  if (change) {  // a diff: what it compares; each report is a view, never the two summed
    document.querySelector("h1").textContent = "tracepool diff";
    $("subtitle").textContent = change.before + " \u2192 " + change.after + " · the views below are of one report each";
    document.querySelector("main").prepend($("tables"));  // what changed is what the reader came for
  }
  const nav = $("views");
  nav.replaceChildren();
  if (change) {
    nav.append(el("span", { class: "label", text: "report:" }));
    reports.forEach((rep, i) => nav.append(el("button", { type: "button", text: rankName(rep, i), "data-report": String(i) })));
  } else if (reports.length > 1) {
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
  // An out-of-memory report says first what failed, as its text does.
  const failed = reports.map((rep, i) => [rep, i]).filter(([rep]) => rep.oom);
  $("oom").hidden = !failed.length;
  $("oom").replaceChildren(...failed.map(([rep, i]) => el("div", {},
    el("strong", { text: (reports.length > 1 ? rankName(rep, i) + ": " : "") + "out of memory on " + deviceName(rep.oom.device) +
      ", " + bytes(rep.oom.requested_bytes) + " requested" }),
    el("pre", { text: rep.oom.message || "" }))));
  $("footer").textContent = (change ? "tracepool diff (schema " + change.schema + ") of two reports (schema " +
    (r.schema || "?") + ")" : "tracepool report (schema " + (r.schema || "?") + "), " + reports.length +
    (reports.length > 1 ? " reports" : " report")) + ". Everything on this page is in this one file; it loads nothing.";
}

function markViews() {
  for (const b of $("views").querySelectorAll("button")) {
    const on = b.dataset.report != null ? Number(b.dataset.report) === state.report
                                         : Number(b.dataset.device) === state.device;
    b.classList.toggle("on", on);
  }
}

// ---- Putting it together ---------------------------------------------------------------------

// Each part is drawn whatever happens to the others; a part that fails says so on the page, and the
// first failure is thrown again at the end (so that it reaches the console).
function drawAll() {
  let failure = null;
  for (const [name, draw] of [["views", markViews], ["devices", drawDevices], ["flame graph", drawFlame],
                              ["timeline", drawTimeline], ["tables", drawTable]]) {
    try {
      draw();
    } catch (e) {
      showError("The " + name + " could not be drawn: " + e.message);
      failure = failure || e;
    }
  }
  if (failure) throw failure;
}

try {
  drawHeader();
  wireFlame();
  wireTables();
  // The growing table first when something grows: that is what the reader came for; the cache when
  // nothing is live.
  if (!change && reports.some((r) => (r.leaks || []).some((s) => s.growing))) state.table = "growing";
  if (!reports.some((r) => (r.leaks || []).length) && reports.some((r) => (r.cached || []).length)) {
    if (!change) state.table = "cached";
    state.flameKind = "cached";
    $("flame-live").classList.remove("on");
    $("flame-cached").classList.add("on");
  }
  if (!reports.some((r) => (r.leaks || []).concat(r.cached || []).some((s) => (s.frames || []).some((f) => f.kind === "python")))) {
    state.pythonOnly = false;
    $("flame-python").checked = false;
  }
  drawAll();
} catch (e) {
  if (!$("error").textContent) showError("The report could not be drawn: " + e.message);
  throw e;
} finally {
  // For tests and the curious: how long the first drawing took, and what it drew.
  window.tracepoolView = { ms: performance.now() - started, state, flame, reports: reports.length };
  document.body.dataset.ready = "1";
}
