// SkyMemory dashboard page: draws each snapshot the server pushes over /ws (skymemory/dashboard/server.py).
// No framework and no build step: the grid is built once per constellation shape and updated in place.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let socket = null;
let connected = false;
let selectedBlock = null;
let gridShape = "";
let snapshotsDrawn = 0; // body[data-snapshots]: tools/dashboard_screenshot.py waits for the first picture

// ---- connection ---------------------------------------------------------------------------------
function connect() {
  socket = new WebSocket(`ws://${location.host}/ws`);
  socket.onopen = () => {
    setConnection(true);
    if (selectedBlock) send({ select: selectedBlock });
  };
  socket.onmessage = (event) => render(JSON.parse(event.data));
  socket.onclose = () => {
    setConnection(false);
    setTimeout(connect, 1000);
  };
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

function setConnection(open) {
  connected = open;
  if (!open) showStatus({ state: "disconnected", text: "disconnected from the dashboard (showing the last picture)" });
}

// the header's first word: the constellation's own state (live, silent, stopped), not only the page's connection
function showStatus(status) {
  const el = $("connection");
  el.textContent = status.text;
  el.className = status.state === "live" ? "good" : "bad";
  el.dataset.state = status.state;
}

// ---- helpers ------------------------------------------------------------------------------------
const esc = (text) => String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const mib = (bytes) => (bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0);
const rate = (x) => (x >= 10 ? x.toFixed(0) : x.toFixed(1));
const ms = (s) => (s * 1000).toFixed(s < 1 ? 1 : 0) + " ms";
const key = (plane, sat) => `${plane},${sat}`;

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// ---- the whole picture --------------------------------------------------------------------------
function render(snap) {
  if (connected && snap.status) showStatus(snap.status);
  const problem = $("problem");
  problem.hidden = !snap.problem;
  problem.textContent = snap.problem || "";
  if (snap.manifest) {
    renderHeader(snap);
    renderGrid(snap);
    renderOverlay(snap);
    renderActivity(snap);
  }
  renderKV(snap.kv, snap.bench);
  renderBench(snap.bench);
  document.body.dataset.snapshots = ++snapshotsDrawn;
}

function renderHeader(snap) {
  const m = snap.manifest;
  const link = m.link && m.link.ground_delay_ms !== undefined ? `, ground link ${m.link.ground_delay_ms} ms` : "";
  $("constellation").textContent = `${m.planes} x ${m.sats} ${m.runtime}${link}, time x${m.time_scale.toFixed(m.time_scale < 10 ? 1 : 0)}`;
  const cells = snap.fleet.cells;
  const upCells = cells.filter((c) => c.state === "up");
  const down = cells.filter((c) => c.state === "down").length;
  const sum = (list, field) => list.reduce((n, c) => n + (c[field] || 0), 0);
  const counts = `<span class="${upCells.length ? "good" : "bad"}">${upCells.length} up</span>` +
    (down ? ` <span class="bad">${down} down</span>` : "");
  // only satellites that answer now count as now; with none up, the last answers are said to be that
  const seen = cells.filter((c) => c.chunks !== undefined);
  $("totals").innerHTML = upCells.length
    ? `${counts} · ${sum(upCells, "chunks")} chunks · ${mib(sum(upCells, "bytes_used"))} of ${mib(sum(upCells, "bytes_budget"))} MiB`
    : counts + (seen.length ? ` · <span class="dim">last seen ${sum(seen, "chunks")} chunks</span>` : "");
  const sky = snap.sky;
  const los = sky.box ? `LOS box of ${sky.servers} servers (${sky.strategy})`
    : `line of sight: the ${sky.servers} nearest satellites (${sky.los_note})`;
  $("step").textContent = `overhead ${sky.overhead[0]}·${sky.overhead[1]} · rotation step ${sky.step} · ${los}`;
}

// ---- the torus grid -----------------------------------------------------------------------------
function buildGrid(planes, sats) {
  const grid = $("grid");
  grid.innerHTML = "";
  grid.style.gridTemplateColumns = `repeat(${sats}, max-content)`;
  for (let p = 0; p < planes; p++) {
    for (let s = 0; s < sats; s++) {
      const cell = document.createElement("div");
      cell.className = "cell waiting";
      cell.id = `cell-${p}-${s}`;
      cell.dataset.plane = p;
      cell.dataset.sat = s;
      cell.innerHTML = `<div class="top"><span class="name">${p}·${s}</span><span class="chunks">–</span></div>` +
        `<div class="mem"><div style="width:0"></div></div><div class="rates">waiting</div>`;
      grid.appendChild(cell);
    }
  }
  const marker = document.createElement("span");
  marker.id = "overhead-marker";
  marker.textContent = "▲";
  marker.title = "the satellite overhead the ground host";
  grid.appendChild(marker);
}

function renderGrid(snap) {
  const m = snap.manifest, sky = snap.sky, kv = snap.kv;
  const shape = `${m.planes}x${m.sats}`;
  if (shape !== gridShape) {
    buildGrid(m.planes, m.sats);
    gridShape = shape;
  }
  const box = new Set(), leaving = new Set(), entering = new Set();
  (sky.los || []).forEach(([p, s]) => box.add(key(p, s)));
  if (sky.leaving) sky.leaving.planes.forEach((p) => leaving.add(key(p, sky.leaving.sat)));
  if (sky.entering) sky.entering.planes.forEach((p) => entering.add(key(p, sky.entering.sat)));
  const holders = new Map(), route = new Set();
  const selected = kv && kv.selected;
  if (selected) {
    selected.holders.forEach((h) => holders.set(key(h.plane, h.sat), h));
    selected.routes.forEach((path) => path.forEach(([p, s]) => route.add(key(p, s))));
  }
  for (const c of snap.fleet.cells) {
    const el = $(`cell-${c.plane}-${c.sat}`);
    const k = key(c.plane, c.sat);
    el.dataset.state = c.state;
    el.dataset.chunks = c.chunks === undefined ? "" : c.chunks;
    const evicting = c.recent && (c.recent.lru_evictions || c.recent.blocks_purged);
    el.className = ["cell", c.state, box.has(k) && "los", leaving.has(k) && "leaving", entering.has(k) && "entering",
      holders.has(k) && "holder", route.has(k) && !holders.has(k) && "route", evicting && "evicting"]
      .filter(Boolean).join(" ");
    if (c.chunks !== undefined) {
      const share = c.bytes_budget ? c.bytes_used / c.bytes_budget : 0;
      el.querySelector(".chunks").textContent = `${c.chunks} ch · ${(share * 100).toFixed(share < 0.1 ? 1 : 0)}%`;
      el.querySelector(".mem div").style.width = `${Math.min(100, share * 100)}%`;
      el.title = `${c.plane}·${c.sat}: ${mib(c.bytes_used)} of ${mib(c.bytes_budget)} MiB, up ${c.uptime_s} s, ` +
        `migrated out ${c.migrated_out} / in ${c.migrated_in}, LRU evictions ${c.lru_evictions}`;
    }
    el.querySelector(".rates").textContent = c.state === "down" ? `DOWN · silent ${c.age_s.toFixed(1)} s`
      : c.state === "waiting" ? "waiting for STATS" : `${rate(c.req_rate)} req/s · ${rate(c.err_rate)} err/s`;
    // the ground's seal-failure ledger: KV blocks this satellite served that did not open (altered, or not theirs)
    let seal = el.querySelector(".seal");
    if (c.seal_failures > 0 && !seal) {
      seal = document.createElement("span");
      seal.className = "seal";
      el.appendChild(seal);
    } else if (!(c.seal_failures > 0) && seal) {
      seal.remove();
    }
    if (c.seal_failures > 0) {
      seal.textContent = `seal ✗ ${c.seal_failures}`;
      seal.title = `${c.seal_failures} KV blocks from ${c.plane}·${c.sat} did not open under the ground's key`;
    }
    let badge = el.querySelector(".badge");
    const holder = holders.get(k);
    if (holder && !badge) {
      badge = document.createElement("span");
      badge.className = "badge";
      el.appendChild(badge);
    } else if (!holder && badge) {
      badge.remove();
    }
    if (holder) badge.textContent = `×${holder.chunks}`;
  }
  const marker = $("overhead-marker");
  const [op, os] = sky.overhead;
  const target = $(`cell-${op}-${os}`);
  if (marker.parentElement !== target) target.appendChild(marker);
  marker.dataset.plane = op;
  marker.dataset.sat = os;
}

// arrows of migrations (from the satellites' counters) and the routes of a get for the selected block
function renderOverlay(snap) {
  const svg = $("overlay");
  svg.querySelectorAll(".drawn").forEach((el) => el.remove());
  const centre = (p, s) => {
    const el = $(`cell-${p}-${s}`);
    return [el.offsetLeft + el.offsetWidth / 2, el.offsetTop + el.offsetHeight / 2];
  };
  const line = (points, cls, attrs) => {
    const el = document.createElementNS(SVG, "polyline");
    el.setAttribute("points", points.map((xy) => xy.join(",")).join(" "));
    el.setAttribute("class", `drawn ${cls}`);
    el.setAttribute("fill", "none");
    for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, value);
    svg.appendChild(el);
  };
  const selected = snap.kv && snap.kv.selected;
  if (selected) {
    for (const path of selected.routes) {
      line(path.map(([p, s]) => centre(p, s)), "route", { stroke: "#37c6d0", "stroke-width": 2, "stroke-opacity": 0.7 });
    }
  }
  for (const flow of snap.fleet.flows) {
    for (const [from] of flow.from) {
      for (const [to] of flow.to) {
        line([centre(flow.plane, from), centre(flow.plane, to)], "migration",
          { stroke: "#ffb347", "stroke-width": 2.5, "marker-end": "url(#arrow)" });
      }
    }
  }
}

// ---- migrations and evictions -------------------------------------------------------------------
const KIND_TEXT = {
  migrated_out: "chunks migrated out", migrated_in: "chunks migrated in",
  lru_evictions: "chunks evicted (LRU)", blocks_purged: "blocks purged",
};

function renderActivity(snap) {
  const sky = snap.sky;
  const every = sky.step_s >= 120 ? `${(sky.step_s / 60).toFixed(1)} min` : `${sky.step_s.toFixed(1)} s`;
  let text = `Next rotation step in ${sky.next_step_in_s.toFixed(1)} s (one every ${every}): overhead moves to ` +
    `${sky.overhead[0]}·${(sky.overhead[1] - 1 + snap.manifest.sats) % snap.manifest.sats}`;
  if (sky.leaving) text += `; column ${sky.leaving.sat} leaves the box, its chunks move to column ${sky.entering.sat}`;
  $("next-step").textContent = text + ".";
  const feed = $("feed");
  feed.innerHTML = "";
  if (!snap.fleet.feed.length) feed.innerHTML = `<li>no MIGRATE or eviction seen yet</li>`;
  for (const item of snap.fleet.feed) {
    const li = document.createElement("li");
    li.innerHTML = `${item.age_s.toFixed(1)} s ago · <b>${item.plane}·${item.sat}</b> ${item.count} ${KIND_TEXT[item.kind]}`;
    feed.appendChild(li);
  }
}

// ---- the KV cache -------------------------------------------------------------------------------
function renderKV(kv, bench) {
  const summary = [];
  if (kv) {
    // where the index is, as the user chose it; a benchmark's own index is named by the run, not by its temporary folder
    const where = kv.index ? `<span class="dim">${esc(kv.index)}</span>`
      : `of the benchmark's run` + (bench && bench.config.model ? ` (<span class="dim">${esc(bench.config.model)}</span>)` : "");
    summary.push(kv.problem ? esc(kv.problem) : `<b>${kv.count}</b> blocks in the ground index ${where}`);
  } else {
    summary.push("no constellation yet");
  }
  if (bench) {
    const o = bench.outcomes;
    summary.push(`benchmark gets: <span class="good">hits ${o.hit}</span> · partial ${o.partial} · ` +
      `<span class="bad">misses ${o.miss}</span>`);
  }
  const sealed = (kv && kv.seal_failures) || [];
  if (sealed.length) {
    const ago = (t) => Math.max(0, Date.now() / 1000 - t);
    summary.push(`<span class="bad">seal failures</span> (KV blocks that did not open): ` + sealed.map((f) =>
      `<b>${f.plane}·${f.sat}</b> ×${f.count} <span class="dim">(last ${ago(f.last_unix).toFixed(0)} s ago)</span>`)
      .join(" · "));
  }
  $("kv-summary").innerHTML = summary.join("<br>");
  renderBlockList((kv && kv.blocks) || []);
  const detail = $("block-detail");
  const s = kv && kv.selected;
  if (!s) {
    detail.textContent = kv && kv.count ? "Select a block to see which satellites hold its chunks." : "";
    return;
  }
  if (s.problem) {
    detail.textContent = s.problem;
    return;
  }
  const rows = s.holders.map((h) => {
    const check = h.confirmed === true ? `<span class="ok">✓ PROBE found chunk ${h.first}</span>`
      : h.confirmed === false ? `<span class="missing">✗ chunk ${h.first} not there</span>` : `<span class="dim">probing…</span>`;
    return `<li><b>${h.plane}·${h.sat}</b> ${h.chunks} chunks ${check}</li>`;
  });
  detail.innerHTML = `<p>Block <code>${esc(s.hash.slice(0, 16))}…</code> (${esc(s.strategy)}, ${s.chunks} chunks) now on ` +
    `${s.holders.length} satellites; a get goes up to the overhead satellite ${s.via[0]}·${s.via[1]} and on over ` +
    `the +GRID routes drawn on the grid.</p><ul id="holders">${rows.join("")}</ul>`;
}

// rebuilt only when the index changes: an item replaced between mouse down and up would lose the click
let blockListKey = "";
function renderBlockList(blocks) {
  const list = $("blocks");
  const listKey = blocks.map((b) => b.hash).join(",");
  if (listKey !== blockListKey) {
    blockListKey = listKey;
    list.innerHTML = "";
    for (const b of blocks) {
      const li = document.createElement("li");
      li.dataset.hash = b.hash;
      const where = b.position === undefined || b.position === null ? "" : ` · block ${b.position}`;
      li.textContent = `${b.hash.slice(0, 16)}…${where} · ${b.chunks} chunks · ${b.strategy}`;
      list.appendChild(li);
    }
  }
  for (const li of list.children) li.classList.toggle("selected", li.dataset.hash === selectedBlock);
}

function selectBlock(hash) {
  selectedBlock = hash;
  send({ select: hash });
}

$("blocks").addEventListener("click", (event) => {
  const li = event.target.closest("li");
  if (li) selectBlock(li.dataset.hash === selectedBlock ? null : li.dataset.hash);
});

// ---- time to first token (a running bench ttft / demo) ------------------------------------------
function renderBench(bench) {
  const status = $("bench-status"), chart = $("ttft-chart"), log = $("bench-log");
  if (!bench) {
    status.innerHTML = `<span class="dim">no event file: start with --events FILE (or skymemory demo --dashboard)</span>`;
    chart.setAttribute("height", 0);
    return;
  }
  const n = bench.measurements.length;
  const cfg = bench.config;
  status.innerHTML = bench.state === "waiting" ? `waiting for a run to write <span class="dim">${esc(bench.file)}</span>`
    : `${bench.state === "done" ? "done" : "running"}: ${esc(cfg.model || "")}, prefixes ${esc((cfg.prefix_tokens || []).join(", "))} ` +
      `tokens, ${n} measurements`;
  drawTTFT(chart, bench.measurements);
  log.innerHTML = "";
  for (const line of bench.logs.slice(-6)) {
    const li = document.createElement("li");
    li.textContent = line.message;
    log.appendChild(li);
  }
}

function outcomeOf(m) {
  if (m.mode === "nocache") return "nocache";
  // device-ram: the KV already in the model's memory, never fetched ("gpu-ram" in event files of older runs)
  if (m.mode === "device-ram" || m.mode === "gpu-ram" || !m.expected_cached_tokens) return "other";
  return m.cached_tokens >= m.expected_cached_tokens ? "hit" : m.cached_tokens > 0 ? "partial" : "miss";
}

// median TTFT per prefix length and mode so far, as horizontal bars (colour: the latest run's cache outcome)
function drawTTFT(svg, measurements) {
  const groups = new Map();
  for (const m of measurements) {
    if (!groups.has(m.prefix_tokens)) groups.set(m.prefix_tokens, new Map());
    const modes = groups.get(m.prefix_tokens);
    if (!modes.has(m.mode)) modes.set(m.mode, []);
    modes.get(m.mode).push(m);
  }
  const width = svg.clientWidth || 400, label = 120, valueRoom = 70, row = 16;
  const longest = Math.max(0.001, ...measurements.map((m) => m.ttft_s));
  let y = 0, parts = [];
  for (const [prefix, modes] of groups) {
    y += 14;
    parts.push(`<text x="0" y="${y - 3}" class="dim">prefix ${prefix} tokens</text>`);
    for (const [mode, runs] of modes) {
      const t = median(runs.map((r) => r.ttft_s));
      const bar = Math.max(1, (width - label - valueRoom) * t / longest);
      parts.push(`<text x="0" y="${y + 11}">${esc(mode)}</text>`,
        `<rect class="${outcomeOf(runs[runs.length - 1])}" x="${label}" y="${y + 2}" width="${bar}" height="11"></rect>`,
        `<text x="${label + bar + 4}" y="${y + 11}">${ms(t)} (${runs.length})</text>`);
      y += row;
    }
  }
  svg.setAttribute("height", y + 4);
  svg.innerHTML = parts.join("");
}

connect();
