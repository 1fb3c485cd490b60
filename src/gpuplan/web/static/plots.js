// Plots from the engine's sweep API: plain SVG line charts.
import { fmt, post, toRequest } from "./state.js";

const SVG = "http://www.w3.org/2000/svg";
const CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144];
const USERS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256];
const GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64];

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

export function chart(svg, { series, hlines = [], vlines = [], xlog = true, xlabel, units = "GB", message }) {
  const W = 720, H = 300, L = 70, R = 130, T = 14, B = 40;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  if (message) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis-label" }, message));
    return;
  }
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = [...series.flatMap((s) => s.points.map((p) => p[1])), ...hlines.map((h) => h.y)];
  if (!xs.length) return;
  const fx = xlog ? Math.log2 : (v) => v;
  const x0 = fx(Math.min(...xs)), x1 = fx(Math.max(...xs));
  const yMax = Math.max(...ys) * 1.08 || 1;
  const px = (v) => L + ((fx(v) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const py = (v) => T + (1 - v / yMax) * (H - T - B);
  svg.append(el("line", { x1: L, x2: W - R, y1: py(0), y2: py(0), class: "axis" }));
  svg.append(el("line", { x1: L, x2: L, y1: T, y2: py(0), class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const v = (yMax / 4) * i;
    svg.append(el("text", { x: L - 6, y: py(v) + 4, "text-anchor": "end", class: "tick" }, fmt(v, units, 0)));
  }
  const ticks = [...new Set(xs)].sort((a, b) => a - b);
  ticks.forEach((t, i) => {
    if (ticks.length > 8 && i % 2) return;
    svg.append(el("text", { x: px(t), y: py(0) + 19, "text-anchor": "middle", class: "tick" }, t >= 1024 ? `${t / 1024}k` : String(t)));
  });
  svg.append(el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "axis-label" }, xlabel));
  const right = []; // labels in the right margin: spread apart below, never overlapping
  for (const h of hlines) {
    svg.append(el("line", { x1: L, x2: W - R, y1: py(h.y), y2: py(h.y), class: h.cls }));
    right.push(el("text", { x: W - R + 4, y: py(h.y) + 4, class: "tick" }, h.label));
  }
  for (const v of vlines) {
    svg.append(el("line", { x1: px(v.x), x2: px(v.x), y1: T, y2: py(0), class: v.cls }));
    svg.append(el("text", { x: px(v.x) + 4, y: T + 12, class: "tick" }, v.label));
  }
  series.forEach((s) => {
    if (!s.points.length) return;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" ");
    svg.append(el("path", { d, class: `series ${s.cls}`, fill: "none" }));
    for (const p of s.points) {
      const c = el("circle", { cx: px(p[0]), cy: py(p[1]), r: 3, class: `dot ${s.cls}` });
      c.append(el("title", {}, `${s.name} at ${p[0]}: ${fmt(p[1], units)}`));
      svg.append(c);
    }
    const lastPoint = s.points[s.points.length - 1];
    right.push(el("text", { x: W - R + 4, y: py(lastPoint[1]) - 4, class: `tick label-${s.cls}` }, s.name));
  });
  spread(right, T + 10, H - B);
  svg.append(...right);
}

// Labels of one column: in their order down the chart, each at least a line below the last
// (pushed back up from the bottom if they run out of room).
function spread(labels, top, bottom) {
  const gap = 14;
  labels.sort((a, b) => Number(a.getAttribute("y")) - Number(b.getAttribute("y")));
  let y = top - gap;
  for (const t of labels) {
    y = Math.max(Number(t.getAttribute("y")), y + gap);
    t.setAttribute("y", y);
  }
  let limit = bottom;
  for (const t of [...labels].reverse()) {
    const v = Math.min(Number(t.getAttribute("y")), limit);
    t.setAttribute("y", v);
    limit = v - gap;
  }
}

function line(points, key, name, cls) {
  return {
    name, cls,
    points: points.filter((p) => !p.error && (key === "total" || key in p.items)).map((p) => [p.value, key === "total" ? p.per_gpu_total_bytes : p.items[key]]),
  };
}

async function sweep(mode, base, vary, values) {
  const r = await post("/api/sweep", { mode, base, vary, values });
  if (!r.ok) throw new Error(r.data.detail || `error ${r.status}`);
  return r.data.points;
}

let token = 0;

export async function drawPlots(state, latest) {
  const mine = ++token;
  const units = state.units;
  const serveState = { ...state, mode: "serve" };
  let base;
  try {
    base = toRequest(serveState).body;
  } catch (err) {
    chart(document.querySelector("#plot-context"), { series: [], message: err.message });
    return;
  }
  // fix the GPU count at what the simulation shows, so curves compare like with like
  const fixed = { ...base, gpus: latest?.mode === "serve" ? latest.gpus : base.gpus, tp: null, pp: null };
  try {
    const [ctx, users] = await Promise.all([
      sweep("serve", fixed, "context", CONTEXTS),
      sweep("serve", fixed, "users", USERS),
    ]);
    if (mine !== token) return;
    const memory = ctx.find((p) => !p.error)?.memory_bytes;
    const budget = ctx.find((p) => !p.error)?.budget_bytes;
    const lines = memory ? [{ y: memory, label: "HBM", cls: "hbm-line" }, { y: budget, label: "budget", cls: "headroom-line" }] : [];
    chart(document.querySelector("#plot-context"), {
      xlabel: `context length (tokens), ${fixed.users} user(s)`, units,
      series: [line(ctx, "total", "total", "total"), line(ctx, "kv_cache", "KV cache", "kv"), line(ctx, "weights", "weights", "weights")],
      hlines: lines,
    });
    const cap = users.find((p) => !p.error)?.max_concurrent_sequences;
    chart(document.querySelector("#plot-users"), {
      xlabel: `concurrent users at ${fixed.context} tokens`, units,
      series: [line(users, "total", "total", "total"), line(users, "kv_cache", "KV cache", "kv")],
      hlines: lines,
      vlines: cap ? [{ x: Math.min(Math.max(cap, 1), 256), label: `capacity ${cap}`, cls: "capacity-line" }] : [],
    });
  } catch (err) {
    chart(document.querySelector("#plot-context"), { series: [], message: err.message });
  }
  const zeroSvg = document.querySelector("#plot-zero");
  const note = document.querySelector("#plot-zero-note");
  if (!window.gpuplanFeatures?.train) {
    chart(zeroSvg, { series: [], message: "Training estimates are not yet available in this version." });
    note.textContent = "";
    return;
  }
  try {
    const trainBase = toRequest({ ...state, mode: "train" }).body;
    const stages = await Promise.all([0, 1, 2, 3].map((z) => sweep("train", { ...trainBase, zero: z, tp: null, pp: null, dp: null }, "gpus", GPU_COUNTS)));
    if (mine !== token) return;
    const first = stages.flat().find((p) => !p.error);
    chart(zeroSvg, {
      xlabel: "GPUs (data parallel)", units,
      series: stages.map((pts, z) => line(pts, "total", `ZeRO-${z}`, `zero${z}`)),
      hlines: first ? [{ y: first.memory_bytes, label: "HBM", cls: "hbm-line" }, { y: first.budget_bytes, label: "budget", cls: "headroom-line" }] : [],
    });
    note.textContent = "";
  } catch (err) {
    chart(zeroSvg, { series: [], message: err.message });
  }
}
