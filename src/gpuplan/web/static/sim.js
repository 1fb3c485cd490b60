// Drawing a server: one column per GPU, its memory filled with the bill's blocks (SVG).
// Geometry only: every size drawn is a figure of the engine's answer, placed on a scale the
// caller fixes (the lesson keeps one scale for a whole step). Blocks persist between answers so
// CSS transitions animate them (none under prefers-reduced-motion).
import { fmt } from "./state.js";

const SVG = "http://www.w3.org/2000/svg";
export const CATEGORY_NAMES = {
  weights: "Weights",
  kv_cache: "KV cache",
  gradients: "Gradients",
  optimizer: "Optimizer states",
  master: "fp32 master weights",
  activations: "Activations",
  transient: "Temporaries (logits, backward)",
  comm: "Communication buffers",
  overhead: "Workspace & context",
  other: "Other",
};

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function layer(svg, id) {
  let g = svg.querySelector(`#${id}`);
  if (!g) {
    g = el("g", { id });
    svg.append(g);
  }
  return g;
}

// The kind of each drawn column: in the plan, a copy of it (replica), idle, or beyond the server.
function columnKind(i, data, view) {
  const planned = view.plan_gpus || data.gpus || 1;
  if (i < planned) return "plan";
  if (data.fits && view.replicas > 1 && i < view.replicas * planned) return "copy";
  return "idle";
}

export const COLUMN_NOTES = {
  plan: "GPU n: holds this plan",
  copy: "copy: runs another replica of the same plan (more users, same bill)",
  idle: "idle: a GPU of the server this plan leaves free",
  extra: "red outline: beyond the server's GPUs (the plan needs more than one server)",
};

/**
 * Draw `data` (an engine answer) into `svg`.
 * opts.scale: bytes at the top of the picture (the caller keeps it fixed within a step).
 * opts.masked: draw the shapes but no numbers (a drill not yet answered).
 * Returns the kinds of column drawn, for the legend.
 */
export function drawServer(svg, data, { scale, masked = false } = {}) {
  const units = data.units || "GB";
  const items = data.per_gpu.items;
  const memory = data.gpu.memory_bytes;
  const budget = data.budget_bytes;
  const total = data.per_gpu_total_bytes;
  const view = data.view || {};
  const server = view.server_gpus || 8;
  const planned = view.plan_gpus || data.gpus || 1;
  const columns = Math.max(server, planned);

  const W = Math.max(280, Math.round(svg.clientWidth || svg.parentElement?.clientWidth || 800));
  const H = Math.max(200, Math.round(svg.clientHeight || 320));
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const narrow = W < 520;
  const left = narrow ? 72 : 78;
  const top = 22, bottom = 22, plotH = H - top - bottom;
  const maxCols = Math.max(2, Math.floor((W - left - 8) / (narrow ? 52 : 40)));
  const drawn = Math.min(columns, maxCols, 16);
  const gap = drawn > 8 ? 5 : 10;
  const colW = Math.min(120, (W - left - 8 - gap * (drawn - 1)) / drawn);
  const top_ = Math.max(scale || 0, memory, total);
  const maxBytes = top_ * 1.03;
  const y = (b) => top + plotH - (b / maxBytes) * plotH;
  const x = (i) => left + i * (colW + gap);

  // static layers: redrawn each time (lines, labels)
  const back = layer(svg, "back");
  const cols = layer(svg, "cols");
  const front = layer(svg, "front");
  back.replaceChildren();
  front.replaceChildren();

  const linesW = x(drawn - 1) + colW - left + 6;
  const kinds = new Set();
  for (let i = 0; i < drawn; i++) {
    // before a reveal, copies look like the plan: the columns do not count the GPUs for the learner
    const kind = masked && columnKind(i, data, view) === "copy" ? "plan" : columnKind(i, data, view);
    const outside = i >= server ? " extra" : "";
    kinds.add(kind);
    if (outside) kinds.add("extra");
    back.append(el("rect", { x: x(i), y: y(memory), width: colW, height: y(0) - y(memory), class: `gpu-box ${kind}${outside}`, rx: 3 }));
    const label = kind === "plan" ? (colW < 44 ? `${i}` : `GPU ${i}`) : kind;
    front.append(el("text", { x: x(i) + colW / 2, y: H - bottom + 15, class: `gpu-label ${kind}${outside}`, "text-anchor": "middle" }, label));
  }
  front.append(el("line", { x1: left - 4, x2: left + linesW, y1: y(memory), y2: y(memory), class: "hbm-line" }));
  front.append(el("text", { x: left - 6, y: y(memory) + 4, class: "axis-label", "text-anchor": "end" }, `HBM ${fmt(memory, units, memory % 1e9 ? 2 : 0)}`));
  front.append(el("line", { x1: left - 4, x2: left + linesW, y1: y(budget), y2: y(budget), class: "headroom-line" }));
  // the line's label under the HBM label, never on it (at 100 % the two lines coincide)
  front.append(el("text", { x: left - 6, y: Math.max(y(budget) + 14, y(memory) + 18), class: "axis-label", "text-anchor": "end" }, `${Math.round(data.headroom * 100)} % line`));
  const lines = [y(memory), y(budget)];

  // blocks: persistent per (column, line) so their size changes animate
  const keep = new Set();
  for (let i = 0; i < drawn; i++) {
    // before a reveal, copies look like the plan: the columns do not count the GPUs for the learner
    const kind = masked && columnKind(i, data, view) === "copy" ? "plan" : columnKind(i, data, view);
    let g = cols.querySelector(`g[data-gpu="${i}"]`);
    if (!g) {
      g = el("g", { "data-gpu": i });
      cols.append(g);
    }
    g.setAttribute("class", `gpu ${kind}`);
    keep.add(g);
    const live = new Set();
    if (kind === "plan" || kind === "copy") {
      let used = 0;
      for (const item of items) {
        const y0 = y(used), y1 = y(used + item.bytes);
        used += item.bytes;
        let block = g.querySelector(`rect[data-key="${item.key}"]`);
        if (!block) {
          block = el("rect", { x: x(i) + 2, y: y0, width: colW - 4, height: 0, "data-key": item.key });
          g.append(block);
          block.getBoundingClientRect(); // start from zero height, then transition
        }
        live.add(block);
        block.setAttribute("class", `block cat-${item.category}`);
        block.setAttribute("x", x(i) + 2);
        block.setAttribute("width", Math.max(1, colW - 4));
        block.setAttribute("y", y1);
        block.setAttribute("height", Math.max(item.bytes > 0 ? 0.5 : 0, y0 - y1));
        if (i === 0) {
          block.setAttribute("tabindex", "0");
          block.setAttribute("role", "img");
          block.setAttribute("aria-label", masked ? `${item.name}` : `${item.name}: ${fmt(item.bytes, units)}. ${item.explain}`);
          const ly = labelY(y0, y1, lines);
          if (!masked && ly !== null && colW > 52) {
            const name = colW > 96 ? `${item.name} ` : "";
            front.append(el("text", { x: x(i) + colW / 2, y: ly, class: "block-label", "text-anchor": "middle" },
              `${name}${fmt(item.bytes, units, 1)}`));
          }
        }
      }
    }
    for (const block of [...g.querySelectorAll("rect.block")]) if (!live.has(block)) block.remove();
  }
  for (const g of [...cols.children]) if (!keep.has(g)) g.remove();
  kinds.notDrawn = columns - drawn;

  // where the stack crosses the limit: an outline and a label, never a tint over the blocks
  const over = view.overflow;
  if (over && over.status !== "fits") {
    const oom = over.status === "oom";
    const limit = oom ? memory : budget;
    const g = el("g", { id: oom ? "oom-marker" : "headroom-marker", class: oom ? "oom" : "over" });
    const width = x(Math.min(drawn, planned) - 1) + colW - left;
    g.append(el("rect", { x: left - 1, y: y(total), width: width + 2, height: Math.max(2, y(limit) - y(total)), class: "overflow-band" }));
    const where = items.find((i) => i.key === (oom ? over.crosses_memory_at : over.crosses_budget_at));
    const amount = oom ? over.over_memory_bytes : over.over_budget_bytes;
    const text = masked
      ? (oom ? "OOM" : `over the ${Math.round(data.headroom * 100)} % line`)
      : oom
        ? `OOM: +${fmt(amount, units)} over HBM${where && !narrow ? ` (at ${where.name})` : ""}`
        : `${narrow ? "Over" : `Over the ${Math.round(data.headroom * 100)} % line`} by ${fmt(amount, units)}`;
    // above the stack and above both lines, so neither line runs through the words
    const ty = Math.max(14, Math.min(y(total), y(memory), y(budget)) - 6);
    const label = el("text", { x: left + 4, y: ty, class: "overflow-label" }, text);
    g.append(label);
    front.append(g);
  }
  return kinds;
}

// Where a block's label goes: its middle, unless the HBM or headroom line crosses the text there;
// then just under (or over) the line, inside the block; null when the block has no room.
function labelY(bottom, top, lines) {
  if (bottom - top <= 15) return null;
  let y = (bottom + top) / 2 + 4;
  for (const line of lines) {
    if (line < y - 13 || line > y + 4) continue;
    if (line + 15 <= bottom - 1) y = line + 15;
    else if (line - 5 >= top + 12) y = line - 5;
    else return null;
  }
  return y;
}

export function legend(node, items, kinds, { masked = false } = {}) {
  node.replaceChildren();
  const seen = new Set();
  for (const item of items) {
    if (seen.has(item.category)) continue;
    seen.add(item.category);
    const span = document.createElement("span");
    span.className = "legend-item";
    const sw = document.createElement("i");
    sw.className = `swatch cat-${item.category}`;
    sw.setAttribute("aria-hidden", "true");
    span.append(sw, CATEGORY_NAMES[item.category] || item.category);
    node.append(span);
  }
  if (masked) return;
  if (kinds && kinds.notDrawn > 0) {
    const span = document.createElement("span");
    span.className = "legend-item column-note more-gpus";
    span.textContent = `+ ${kinds.notDrawn} more GPUs not drawn (same columns as those shown)`;
    node.append(span);
  }
  for (const kind of ["copy", "idle", "extra"]) {
    if (!kinds || !kinds.has(kind)) continue;
    const span = document.createElement("span");
    span.className = `legend-item column-note ${kind}`;
    span.textContent = COLUMN_NOTES[kind];
    node.append(span);
  }
}

// A training answer's step as a timeline (`phases`, `peak_phase`, `memory_figures`): one row per
// phase, its bar the phase's `bytes_by_category` on the caller's scale with the HBM marked, its
// total as the engine gives it; the engine's peak phase marked. Nothing here adds bytes up.
export function drawTimeline(node, data, { scale, masked = false } = {}) {
  const phases = Array.isArray(data.phases) ? data.phases : [];
  node.hidden = !phases.length;
  node.replaceChildren();
  if (!phases.length) return;
  const units = data.units || "GB";
  const memory = data.gpu.memory_bytes;
  const peak = phases.find((p) => p.name === data.peak_phase);
  const title = document.createElement("p");
  title.className = "timeline-title";
  title.textContent = `One training step as a timeline: memory per GPU in each phase (black line: HBM ${fmt(memory, units, memory % 1e9 ? 2 : 0)})`;
  node.append(title);

  const top = Math.max(scale || 0, memory, ...phases.map((p) => p.total_bytes)) * 1.03;
  const order = categoryOrder(data, phases);
  const list = document.createElement("ol");
  list.className = "phases";
  for (const phase of phases) {
    const isPeak = phase === peak;
    const li = document.createElement("li");
    li.className = `phase${isPeak ? " peak" : ""}${phase.total_bytes > memory ? " over" : ""}`;
    li.dataset.phase = phase.name;
    const name = document.createElement("span");
    name.className = "phase-name";
    name.textContent = phase.label || phase.name;
    const bar = document.createElement("span");
    bar.className = "phase-bar";
    bar.setAttribute("aria-hidden", "true");
    for (const category of order) {
      const bytes = phase.bytes_by_category[category] || 0;
      if (bytes <= 0) continue;
      const seg = document.createElement("i");
      seg.className = `cat-${category}`;
      seg.style.width = `${(100 * bytes) / top}%`;
      if (!masked) seg.title = `${CATEGORY_NAMES[category] || category}: ${fmt(bytes, units)}`;
      bar.append(seg);
    }
    const hbm = document.createElement("b");
    hbm.className = "phase-hbm";
    hbm.style.left = `${(100 * memory) / top}%`;
    bar.append(hbm);
    const total = document.createElement("span");
    total.className = "phase-total";
    total.textContent = masked ? "?" : fmt(phase.total_bytes, units);
    const tag = document.createElement("span");
    tag.className = "phase-peak";
    tag.textContent = isPeak ? "peak" : "";
    li.append(name, bar, total, tag);
    list.append(li);
  }
  node.append(list);
  const figures = data.memory_figures;
  if (peak && figures && !masked) {
    const p = document.createElement("p");
    p.className = "timeline-note";
    p.id = "timeline-peak";
    const reserved = figures.reserved_bytes !== figures.allocated_bytes
      ? `, ${fmt(figures.reserved_bytes, units)} reserved by the caching allocator`
      : "";
    p.textContent = `The bill is the peak, ${peak.label || peak.name}: ${fmt(figures.allocated_bytes, units)} allocated${reserved}; ${fmt(figures.nvidia_smi_bytes, units)} as nvidia-smi shows it, with the CUDA context.`;
    node.append(p);
  }
}

// Categories stacked in the order the bill lists them (the picture's order), then any others.
function categoryOrder(data, phases) {
  const order = [];
  const add = (c) => { if (!order.includes(c)) order.push(c); };
  for (const item of data.per_gpu.items) add(item.category);
  for (const phase of phases) for (const c of Object.keys(phase.bytes_by_category || {})) add(c);
  return order;
}
