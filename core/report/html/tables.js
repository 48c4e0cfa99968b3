// tables.js: the HTML report's viewer, part 4 of 5 (model.js says how the parts fit).

// ---- Device cards: nvidia-smi's memory, by what holds it -------------------------------------
// On the host backend the device is emulated in host memory: no driver, no nvidia-smi, no NVML, and a
// process list that holds this process alone. Its card says so, and its bar is what the emulated device
// handed out (a few MiB of a 16 GiB capacity would draw an empty bar), the capacity said in words.

function stat(r, device, key) {
  const s = (r.stats || {})[String(device)] || {};
  return s[key + ".all.current"] ?? s[key] ?? 0;
}

function deviceCard(r, ri, d) {
  const allocated = stat(r, d.device, "allocated_bytes");
  const reserved = stat(r, d.device, "reserved_bytes");
  const peak = ((r.stats || {})[String(d.device)] || {})["allocated_bytes.all.peak"];
  const cached = Math.max(0, reserved - allocated);
  const emulated = r.backend === "host";
  const title = (reports.length > 1 ? rankName(r, ri) + ", " : "") + deviceName(d.device) +
    (emulated ? ", emulated in host memory (host backend)" : "");
  const card = el("div", { class: "card" }, el("h3", { text: title }));
  if (d.context === false)  // Note [No context as a side effect] in core/backend/backend.h
    card.append(el("p", { text: "not used by this process (no context on it)" + (emulated ? "" : "; the figures below are NVML's") }));
  const used = d.used_bytes || 0;
  const total = d.total_bytes || 0;
  const scale = emulated ? Math.max(used, reserved, 1) : Math.max(total, used, reserved, 1);
  let others = 0;
  for (const p of emulated ? [] : d.processes || []) if (p.pid !== (r.process || {}).pid && p.used_bytes != null) others += p.used_bytes;
  const outside = Math.max(0, (used ? used : reserved) - reserved - others);
  const parts = [["live", allocated, "allocated by live blocks"], ["cached", cached, "cached: reserved but free"],
                 ["outside", outside, emulated ? "outside tracepool (host_outside, standing for a CUDA context)"
                                               : "outside tracepool in this process and the driver (CUDA context, libraries)"],
                 ["others", others, "other processes"]];
  const bar = el("div", { class: "bar", title: emulated ? "what the emulated device handed out, " + bytes(scale)
                                                        : "the device's memory, " + bytes(total || scale) });
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
  if (d.free_page_bytes != null) {  // Note [Fragmentation in reports] in core/report/report.h
    const fragmentation = d.fragmentation_bytes ?? Math.max(0, (d.cached_bytes || 0) - (d.largest_free_block || 0));
    card.append(el("p", { class: "detail", text: "fragmentation " + bytes(fragmentation) +
      " (cached outside the largest free block); " + bytes(d.free_page_bytes) + " of the cache in whole 2 MiB pages" +
      (d.segments ? "; segments: " + d.segments : "") }));
  }
  if (d.observed_bytes || d.observed_managed_bytes || d.observed_host_bytes) {  // Note [Observed memory] in core/observed.h
    card.append(el("p", { text: "seen outside the pool (by the interposer, or told through tracepool_observe_alloc): " +
      bytes(d.observed_bytes || 0) + " on the device, " +
      (d.observed_managed_bytes ? bytes(d.observed_managed_bytes) + " managed (on the device where touched), " : "") +
      bytes(d.observed_host_bytes || 0) + " pinned host; their sites are in the tables, tagged by source" }));
  }
  if (emulated) {
    card.append(el("p", { class: "detail", text: "The bar is the " + bytes(scale) + " the emulated device handed out" +
      (total ? ", " + percent(scale, total) + " of its " + bytes(total) + " capacity (host_capacity in TRACEPOOL_CONF)" : "") +
      "; with no GPU behind it, there are no other processes to list." }));
    return card;
  }
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
  $("summary-title").textContent = reports.length && reports.every((r) => r.backend === "host") ?
    "Where the emulated device's memory went" : "Where nvidia-smi's memory went";
  for (const [r, ri] of chosenReports())
    for (const d of r.devices || [])
      if (state.device < 0 || d.device === state.device) box.append(deviceCard(r, ri, d));
  if (!box.children.length) box.append(el("p", { class: "detail", text: "no device in this report" }));
}

// ---- Tables ----------------------------------------------------------------------------------

const TABLES = {
  ...(change ? { changed: { title: "Changed", list: "changes" } } : {}),  // drawn by drawChanges
  live: { title: "Live", list: "leaks", note: (r) => r.reason === "exit" ?
    "Leaked: memory still allocated at exit, by call site." : "Live: memory allocated now, by call site." },
  growing: { title: "Growing", list: "leaks", filter: (e) => e.s.growing,
    note: (r) => "Sites whose live memory grew across the " + (r.growth_basis === "automatic marks" ? "automatic marks" : "marks") +
      (r.growth_basis === "none" ? " (too few marks were made to tell: mark each epoch, tracepool.mark(\"epoch\"), and " +
        "three marks are enough)" : "") + "." },
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
    for (const p of s.sites) box.append(el("div", { text: "  " + bytes(p.bytes) + " at " + siteTitle(p) }));
  }
  return box;
}

// A table's heading row: "#", a sortable heading per column (the one sorted by, if any, says which
// way), then the unsortable `trailing` ones. A click on a sortable heading sorts by it, again reverses.
function sortableHead(columns, sortBy, trailing) {
  const head = el("tr", {}, el("th", { text: "#" }));
  for (const [key, title] of columns) {
    const th = el("th", { text: title, "data-key": key });
    if (sortBy && key === sortBy[0]) th.setAttribute("aria-sort", state.sort.dir < 0 ? "descending" : "ascending");
    head.append(th);
  }
  for (const text of trailing) head.append(el("th", { text }));
  head.addEventListener("click", (ev) => {
    const key = ev.target.dataset && ev.target.dataset.key;
    if (!key) return;
    state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : -1 };
    drawTable();
  });
  return head;
}

function drawTable() {
  const spec = TABLES[state.table];
  const tabs = $("table-tabs");
  for (const b of tabs.querySelectorAll("button")) b.classList.toggle("on", b.dataset.table === state.table);
  if (spec.list === "changes") return drawChanges();
  let rows = entries(spec.list);
  if (spec.filter) rows = rows.filter(spec.filter);
  const columns = COLUMNS[spec.list];
  const sortBy = columns.find((c) => c[0] === state.sort.key) || columns[0];
  rows.sort((a, b) => state.sort.dir * ((sortBy[2](a) ?? 0) - (sortBy[2](b) ?? 0)) || a.index - b.index);
  const first = chosenReports()[0];
  let where = "";
  if (state.device >= 0)
    where = spec.list === "retained" ? " of the sites holding memory on " + deviceName(state.device) + " (their bytes on every device)"
      : spec.list === "pools" ? " on " + deviceName(state.device)
      : " with memory on " + deviceName(state.device) + " (bytes and blocks on it; the other figures are of every device)";
  $("table-note").textContent = (first ? spec.note(first[0]) : "") + " " + count(rows.length) + (rows.length === 1 ? " row" : " rows") +
    where + "." + (lacksDeviceShares() ? " This report predates per-device figures: choose all devices to see its sites." : "") +
    " Click a row for its whole stack, a heading to sort.";
  const multi = state.report < 0 && reports.length > 1;
  const head = sortableHead(columns, sortBy, (multi ? ["process"] : []).concat(spec.list === "pools" ? "pool" : "site"));
  const body = el("tbody");
  const span = columns.length + (multi ? 3 : 2);
  rows.slice(0, state.shown).forEach((e, i) => {
    const id = state.table + ":" + e.ri + ":" + e.index;
    const site = el("td", { class: "site" });
    if (spec.list === "pools") site.append(e.s.label + " ");
    site.append(siteTitle(e.s));
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
      // The change starts in the library's order (the largest change, live and cached, first).
      state.sort = { key: spec.list === "changes" ? "" : COLUMNS[spec.list][0][0], dir: -1 };
      state.shown = 200;
      drawTable();
    } }));
}

// ---- The change between two reports (a diff's page) ---------------------------------------------

const signedBytes = (n) => (n > 0 ? "+" : "") + bytes(n);

// Each site whose live or cached bytes changed, as the text diff lists them (core/report/compare.cpp). The
// change is of every device: a diff holds no per-device figures.
function drawChanges() {
  const columns = [["live", "live change", (s) => s.live_change, signedBytes], ["live_before", "live before", (s) => s.live_before, bytes],
                   ["live_after", "live after", (s) => s.live_after, bytes], ["cached", "cached change", (s) => s.cached_change, signedBytes],
                   ["cached_before", "cached before", (s) => s.cached_before, bytes],
                   ["cached_after", "cached after", (s) => s.cached_after, bytes]];
  const rows = (change.sites || []).map((s, index) => ({ s, index })).filter((e) => e.s.live_change || e.s.cached_change);
  const sortBy = columns.find((c) => c[0] === state.sort.key);
  if (sortBy) rows.sort((a, b) => state.sort.dir * ((sortBy[2](a.s) ?? 0) - (sortBy[2](b.s) ?? 0)) || a.index - b.index);
  const totals = change.totals || {};
  const total = (key, label) => totals[key] ? label + " " + bytes(totals[key].before) + " \u2192 " + bytes(totals[key].after) +
    " (" + signedBytes(totals[key].change) + ")" : "";
  $("table-note").textContent = "What changed from " + change.before + " to " + change.after + ": " +
    [total("allocated_bytes", "allocated"), total("reserved_bytes", "reserved"), total("cached_bytes", "cached")].filter(Boolean).join(", ") +
    ". " + count(rows.length) + (rows.length === 1 ? " call site" : " call sites") + " changed" +
    (state.device >= 0 ? " (on every device: a diff has no figures by device)" : "") + ". Click a row for its whole stack, a heading to sort.";
  const head = sortableHead(columns, sortBy, ["site"]);
  const body = el("tbody");
  rows.slice(0, state.shown).forEach((e, i) => {
    const id = "changed:" + e.index;
    const site = el("td", { class: "site" }, siteTitle(e.s));
    if (e.s.status !== "both") site.append(" ", el("span", { class: "badge " + e.s.status, text: e.s.status.toUpperCase() }));
    if ((e.s.tags || []).length) site.append(" [" + e.s.tags.join("/") + "]");
    const tr = el("tr", { class: "site-row" + (state.open.has(id) ? " open" : ""), "data-id": id }, el("td", { class: "num", text: String(i + 1) }));
    for (const [, , value, shown] of columns) tr.append(el("td", { class: "num", text: shown(value(e.s)) }));
    tr.append(site);
    tr.addEventListener("click", () => {
      if (state.open.has(id)) state.open.delete(id); else state.open.add(id);
      drawTable();
    });
    body.append(tr);
    if (state.open.has(id)) body.append(el("tr", { class: "stack-row" }, el("td", { colspan: String(columns.length + 2) }, stackView(e))));
  });
  const box = $("table-box");
  box.replaceChildren(el("table", {}, el("thead", {}, head), body));
  if (rows.length > state.shown)
    box.append(el("button", { type: "button", class: "more", text: "show all " + count(rows.length) + " rows",
      onclick: () => { state.shown = Infinity; drawTable(); } }));
}
