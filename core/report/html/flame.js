// flame.js: the HTML report's viewer, part 2 of 5 (model.js says how the parts fit).

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

// The zoom is kept as the keys of the path to the focused frame, since every drawing builds the tree
// anew; a path the new tree lacks (another view) is the whole graph.
function pathOf(n) {
  const keys = [];
  for (; n && n.parent; n = n.parent) keys.unshift(n.key);
  return keys.length ? keys : null;
}

function nodeAtPath(keys) {
  let n = flame.root;
  for (const k of keys || []) {
    n = n.children.get(k);
    if (!n) return null;
  }
  return n;
}

function layoutFlame(width) {
  const nodes = [];
  const focus = nodeAtPath(state.zoom) || flame.root;
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
    $("flame-detail").textContent = "No " + (state.flameKind === "live" ? "live" : "cached") + " memory here." +
      (lacksDeviceShares() ? " This report predates per-device figures: choose all devices." : "");
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
    const focused = nodeAtPath(state.zoom) || flame.root;
    state.zoom = pathOf(v.n === focused ? v.n.parent : v.n);  // the focused frame again: one level out
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
