// Drawing a server: one column per GPU, its memory filled with the bill's blocks (SVG).
import { fmt } from "./state.js";

const SVG = "http://www.w3.org/2000/svg";
const MAX_DRAWN = 16;
export const CATEGORY_NAMES = {
  weights: "Weights",
  kv_cache: "KV cache",
  gradients: "Gradients",
  optimizer: "Optimizer states",
  activations: "Activations",
  overhead: "Workspace & context",
  other: "Other",
};

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function drawServer(svg, data) {
  const title = svg.querySelector("title");
  svg.replaceChildren(title);
  const units = data.units || "GB";
  const items = data.per_gpu.items;
  const memory = data.gpu.memory_bytes;
  const budget = data.budget_bytes;
  const total = data.per_gpu_total_bytes;
  const view = data.view || {};
  const server = view.server_gpus || 8;
  const planned = view.plan_gpus || data.gpus || 1;
  const columns = Math.max(server, planned);
  // a phone-width picture shows the first GPUs large rather than all of them tiny
  const narrow = svg.clientWidth > 0 && svg.clientWidth < 520;
  const drawn = Math.min(columns, narrow ? 4 : MAX_DRAWN);

  const W = 800, top = 40, bottom = 30, H = 330, plotH = H - top - bottom, left = 84;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const gap = drawn > 8 ? 6 : 12;
  const colW = Math.min(110, (W - left - 8 - gap * (drawn - 1)) / drawn);
  const maxBytes = Math.max(memory, total) * 1.04;
  const y = (b) => top + plotH - (b / maxBytes) * plotH;
  const x = (i) => left + i * (colW + gap);

  // axis labels for the two lines
  const linesW = x(drawn - 1) + colW - left + 8;
  svg.append(el("line", { x1: left - 6, x2: left + linesW, y1: y(memory), y2: y(memory), class: "hbm-line" }));
  svg.append(el("text", { x: left - 8, y: y(memory) + 4, class: "axis-label", "text-anchor": "end" }, `HBM ${fmt(memory, units, 0)}`));
  svg.append(el("line", { x1: left - 6, x2: left + linesW, y1: y(budget), y2: y(budget), class: "headroom-line" }));
  svg.append(el("text", { x: left - 8, y: y(budget) + 12, class: "axis-label", "text-anchor": "end" }, `${Math.round(data.headroom * 100)} % line`));

  for (let i = 0; i < drawn; i++) {
    const inPlan = i < planned;
    const outside = i >= server;
    const replica = !inPlan && data.fits && view.replicas > 1 && i < view.replicas * planned;
    const g = el("g", { class: `gpu${inPlan ? "" : replica ? " replica" : " idle"}${outside ? " outside" : ""}`, "data-gpu": i });
    g.append(el("rect", { x: x(i), y: y(memory), width: colW, height: y(0) - y(memory), class: "gpu-box", rx: 3 }));
    if (inPlan || replica) {
      let used = 0;
      for (const item of items) {
        const y0 = y(used), y1 = y(used + item.bytes);
        used += item.bytes;
        if (item.bytes <= 0) continue;
        const block = el("rect", {
          x: x(i) + 2, y: y1, width: colW - 4, height: Math.max(0.5, y0 - y1),
          class: `block cat-${item.category}`, "data-key": item.key,
        });
        if (i === 0) {
          block.setAttribute("tabindex", "0");
          block.setAttribute("role", "img");
          block.setAttribute("aria-label", `${item.name}: ${fmt(item.bytes, units)}. ${item.explain}`);
        }
        g.append(block);
        if (i === 0 && y0 - y1 > 15 && colW > 54) {
          g.append(el("text", { x: x(i) + colW / 2, y: (y0 + y1) / 2 + 4, class: "block-label", "text-anchor": "middle" },
            colW > 90 ? `${item.name} ${fmt(item.bytes, units, 1)}` : fmt(item.bytes, units, 1)));
        }
      }
    }
    const label = outside ? "extra" : replica ? "copy" : inPlan ? `GPU ${i}` : "idle";
    g.append(el("text", { x: x(i) + colW / 2, y: H - bottom + 16, class: "gpu-label", "text-anchor": "middle" }, label));
    svg.append(g);
  }
  if (columns > drawn) {
    svg.append(el("text", { x: W - 4, y: H - 4, class: "axis-label", "text-anchor": "end" }, `… ${columns - drawn} more GPUs with the same bill`));
  }

  const over = view.overflow;
  if (over && over.status !== "fits") {
    const oom = over.status === "oom";
    const limit = oom ? memory : budget;
    const g = el("g", { id: oom ? "oom-marker" : "headroom-marker", class: oom ? "oom" : "over" });
    const width = x(Math.min(drawn, planned) - 1) + colW - left;
    g.append(el("rect", { x: left, y: y(total), width, height: Math.max(2, y(limit) - y(total)), class: "overflow-band" }));
    const where = items.find((i) => i.key === (oom ? over.crosses_memory_at : over.crosses_budget_at));
    const amount = oom ? over.over_memory_bytes : over.over_budget_bytes;
    const text = oom
      ? `OOM: +${fmt(amount, units)} over HBM${where ? ` (at ${where.name})` : ""}`
      : `Over the ${Math.round(data.headroom * 100)} % line by ${fmt(amount, units)}`;
    g.append(el("text", { x: left + 4, y: Math.max(14, y(total) - 8), class: "overflow-label" }, text));
    svg.append(g);
  }
}

export function legend(node, items) {
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
}
