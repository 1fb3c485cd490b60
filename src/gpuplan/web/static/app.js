// gpuplan web: the controls, the live simulation, routing and the shareable URL.
import { DEFAULTS, PASTED, InputError, count, fmt, fromQuery, normalise, post, toQuery, toRequest } from "./state.js";
import { drawServer, legend } from "./sim.js";
import { Lesson } from "./lesson.js";
import { drawPlots } from "./plots.js";

const $ = (sel) => document.querySelector(sel);
const form = $("#controls");
let state = normalise({});
let route = { tab: "playground", step: null };
let seq = 0;
let timer = null;
let inflight = null;
export let last = null; // the latest engine response shown

// --- catalogs -----------------------------------------------------------------------------
async function loadCatalogs() {
  const [models, gpus, precisions, features] = await Promise.all(
    ["/api/models", "/api/gpus", "/api/precisions", "/api/features"].map((p) => fetch(p).then((r) => r.json())),
  );
  const model = $("#c-model");
  for (const m of models.models) model.append(new Option(`${m.id} (${m.attention}, ${m.layers} layers)`, m.id));
  model.append(new Option("Pasted config.json…", PASTED));
  const gpu = $("#c-gpu");
  for (const g of gpus.gpus) gpu.append(new Option(`${g.name} (${fmt(g.memory_bytes, "GB", 0)})`, g.id));
  gpu.querySelector('option[value="h100-sxm"]')?.setAttribute("value", "h100-sxm");
  const dtype = $("#c-dtype"), kv = $("#c-kvdtype");
  dtype.append(new Option("checkpoint's own", "auto"));
  kv.append(new Option("same as weights", "auto"));
  for (const p of precisions.precisions) {
    dtype.append(new Option(`${p.id} (${p.bytes_per_param} B/param)`, p.id));
    if (p.kv) kv.append(new Option(p.id, p.id));
  }
  window.gpuplanFeatures = features;
}

// --- controls <-> state ---------------------------------------------------------------------
const FIELDS = ["model", "config", "kv_heads", "dtype", "kv_dtype", "context", "users", "gpu", "gpu_memory",
  "server_gpus", "gpus", "tp", "pp", "dp", "headroom", "units", "method", "lora_rank", "zero", "micro_batch", "seq"];

function gpuValue(id) {
  // lesson scenarios say "h100"; the select holds catalog ids
  const sel = $("#c-gpu");
  if ([...sel.options].some((o) => o.value === id)) return id;
  const alias = { h100: "h100-sxm", h200: "h200", b200: "b200", a100: "a100-80gb" }[id];
  return alias || id;
}

function writeControls() {
  for (const name of FIELDS) {
    const input = form.elements[name];
    if (!input) continue;
    input.value = name === "gpu" ? gpuValue(state.gpu) : String(state[name]);
  }
  form.elements.checkpointing.checked = state.checkpointing;
  for (const r of form.querySelectorAll('input[name="mode"]')) r.checked = r.value === state.mode;
  $("#c-context-range").value = String(Math.log2(state.context));
  $("#c-context-out").textContent = count(state.context);
  $("#c-users-range").value = String(Math.log2(state.users));
  $("#c-users-out").textContent = count(state.users);
  $("#config-box").hidden = state.model !== PASTED;
  document.body.dataset.mode = state.mode;
}

function readControls() {
  const next = {};
  for (const name of FIELDS) {
    const input = form.elements[name];
    if (input) next[name] = input.value;
  }
  next.checkpointing = form.elements.checkpointing.checked;
  next.mode = form.querySelector('input[name="mode"]:checked').value;
  return normalise(next);
}

function roundSlider(value) {
  const n = 2 ** Number(value);
  return n >= 1024 ? Math.round(n / 256) * 256 : Math.max(1, Math.round(n));
}

let inputAt = null;
form.addEventListener("input", (event) => {
  inputAt = performance.now();
  const id = event.target.id;
  if (id === "c-context-range") form.elements.context.value = roundSlider(event.target.value);
  if (id === "c-users-range") form.elements.users.value = roundSlider(event.target.value);
  setState(readControls(), { fromControls: true });
});
form.addEventListener("submit", (e) => e.preventDefault());

export function setState(next, { fromControls = false } = {}) {
  state = normalise(next);
  if (!fromControls) writeControls();
  else {
    $("#c-context-range").value = String(Math.log2(state.context));
    $("#c-context-out").textContent = count(state.context);
    $("#c-users-range").value = String(Math.log2(state.users));
    $("#c-users-out").textContent = count(state.users);
    $("#config-box").hidden = state.model !== PASTED;
    document.body.dataset.mode = state.mode;
  }
  updateUrl();
  schedule();
}

export function getState() {
  return { ...state };
}

// --- asking the engine ----------------------------------------------------------------------
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 30);
}

async function refresh() {
  const mine = ++seq;
  let request;
  try {
    request = toRequest(state);
  } catch (err) {
    if (err instanceof InputError) return showError(err.message);
    throw err;
  }
  if (inflight) inflight.abort();
  inflight = new AbortController();
  let answer;
  try {
    answer = await post(request.path, request.body, inflight.signal);
  } catch (err) {
    if (err.name === "AbortError") return;
    return showError(`cannot reach the gpuplan server (${err.message})`);
  }
  if (mine !== seq) return;
  if (!answer.ok) return showError(answer.data.detail || `error ${answer.status}`, answer.status);
  render(answer.data);
  if (route.tab === "plots") drawPlots(state, answer.data);
}

function showError(message, status) {
  const v = $("#verdict");
  v.className = status === 501 ? "verdict unavailable" : "verdict error";
  v.textContent = status === 501 ? `Not yet available: ${message}` : `Cannot size this: ${message}`;
  $("#gpus").classList.add("stale");
  document.body.dataset.rendered = String(++renders);
}

let renders = 0;

function render(data) {
  last = data;
  const units = data.units || "GB";
  const items = data.per_gpu.items;
  $("#gpus").classList.remove("stale");
  drawServer($("#gpus"), data);
  legend($("#legend"), items);

  const v = $("#verdict");
  const over = data.view?.overflow || { status: data.fits ? "fits" : "over_headroom" };
  const memory = data.gpu.memory_bytes;
  const pct = Math.round((data.per_gpu_total_bytes / memory) * 100);
  const head = `${data.gpus} × ${data.gpu.name}${data.tp ? `, tp ${data.tp} × pp ${data.pp}` : ""}`;
  if (data.fits) {
    v.className = "verdict fits";
    v.textContent = `Fits: ${fmt(data.per_gpu_total_bytes, units)} of ${fmt(memory, units)} per GPU (${pct} %) on ${head}.`;
  } else if (over.status === "oom") {
    v.className = "verdict oom";
    v.textContent = `Out of memory: ${fmt(data.per_gpu_total_bytes, units)} per GPU is ${fmt(over.over_memory_bytes, units)} more than the ${fmt(memory, units)} of HBM (${head}).`;
  } else if (over.status === "over_headroom") {
    v.className = "verdict over";
    v.textContent = `Does not fit: ${fmt(data.per_gpu_total_bytes, units)} per GPU is ${fmt(over.over_budget_bytes, units)} over the ${Math.round(data.headroom * 100)} % line (${head}).`;
  } else {
    v.className = "verdict over";
    v.textContent = `Does not fit: ${head}.`;
  }
  if (data.mode === "serve" && !data.fits && data.max_concurrent_sequences < data.users) {
    v.textContent += ` KV room for ${count(data.max_concurrent_sequences)} of ${count(data.users)} user(s).`;
  }

  const body = $("#bill tbody");
  body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement("tr");
    tr.dataset.key = item.key;
    const name = document.createElement("th");
    name.scope = "row";
    const sw = document.createElement("i");
    sw.className = `swatch cat-${item.category}`;
    name.append(sw, item.name);
    const size = document.createElement("td");
    size.className = "num";
    size.textContent = fmt(item.bytes, units);
    const how = document.createElement("td");
    how.className = "explain";
    how.textContent = item.explain;
    tr.append(name, size, how);
    body.append(tr);
  }
  const total = document.createElement("tr");
  total.className = "total";
  total.innerHTML = "<th scope='row'>Total per GPU</th><td class='num' id='total-bytes'></td><td></td>";
  total.querySelector("#total-bytes").textContent = fmt(data.per_gpu_total_bytes, units);
  total.lastChild.textContent = `budget ${fmt(data.budget_bytes, units)} (${Math.round(data.headroom * 100)} % of ${fmt(memory, units)})`;
  body.append(total);

  const facts = $("#facts");
  facts.replaceChildren();
  const add = (label, value, id) => {
    const p = document.createElement("p");
    const b = document.createElement("b");
    b.textContent = `${label}: `;
    const s = document.createElement("span");
    if (id) s.id = id;
    s.textContent = value;
    p.append(b, s);
    facts.append(p);
  };
  if (data.params_total) add("Parameters", `${count(data.params_total)}${data.params_active !== data.params_total ? ` (${count(data.params_active)} active)` : ""}`);
  if (data.mode === "serve") {
    add("KV cache per token", `${count(data.kv_bytes_per_token)} bytes`, "kv-per-token");
    add("KV capacity", `${count(data.kv_capacity_tokens)} tokens = ${count(data.max_concurrent_sequences)} concurrent sequences of ${count(data.context)}`, "kv-capacity");
    if (data.fits && data.view?.replicas > 1) add("Server", `${data.view.server_gpus} GPUs hold ${data.view.replicas} copies of this ${data.gpus}-GPU plan`);
  }

  const fixes = $("#fixes");
  fixes.replaceChildren();
  if (data.fixes && data.fixes.length) {
    const h = document.createElement("h3");
    h.textContent = "Cheapest fix";
    fixes.append(h);
    const list = document.createElement("ul");
    data.fixes.forEach((fix, n) => {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = n === 0 ? "fix cheapest" : "fix";
      button.textContent = `${fix.label}: ${fix.gpus} GPU(s), ${fmt(fix.per_gpu_total_bytes, units)} per GPU`;
      button.addEventListener("click", () => applyFix(fix.change));
      li.append(button);
      list.append(li);
    });
    fixes.append(list);
  }

  const trail = $("#trail");
  trail.replaceChildren();
  for (const a of data.search || []) {
    const li = document.createElement("li");
    li.textContent = `${a.gpus} GPU${a.gpus > 1 ? "s" : ""}: ${a.reason}`;
    if (a.fits) li.className = "fits";
    trail.append(li);
  }
  $("#trail-box").hidden = !(data.search && data.search.length);
  const notes = $("#notes");
  notes.replaceChildren();
  for (const n of [...(data.notes || []), ...(data.view?.ignored_controls?.length ? [`controls this engine ignores: ${data.view.ignored_controls.join(", ")}`] : [])]) {
    const li = document.createElement("li");
    li.textContent = n;
    notes.append(li);
  }
  document.body.dataset.rendered = String(++renders);
  if (inputAt !== null) {
    document.body.dataset.latency = String(Math.round(performance.now() - inputAt));
    inputAt = null;
  }
  if (!window.gpuplanFirstRender) window.gpuplanFirstRender = performance.now();
}

function applyFix(change) {
  const next = { ...state };
  for (const [k, v] of Object.entries(change)) {
    if (k === "gpus") next.gpus = v === "auto" ? "auto" : String(v);
    else next[k] = v;
  }
  if ("gpus" in change) { next.tp = ""; next.pp = ""; }
  setState(next);
}

// --- tooltip: the formula with its numbers ---------------------------------------------------
const tip = $("#tooltip");
function showTip(target) {
  if (!last || !target?.dataset?.key) return;
  const item = last.per_gpu.items.find((i) => i.key === target.dataset.key);
  if (!item) return;
  tip.replaceChildren();
  const h = document.createElement("strong");
  h.textContent = `${item.name}: ${fmt(item.bytes, last.units)}`;
  const f = document.createElement("code");
  f.textContent = item.explain;
  const g = document.createElement("small");
  g.textContent = item.formula;
  tip.append(h, f, g);
  tip.hidden = false;
  const box = target.getBoundingClientRect();
  const stage = $(".stage").getBoundingClientRect();
  tip.style.left = `${Math.min(box.right - stage.left + 8, stage.width - 300)}px`;
  tip.style.top = `${box.top - stage.top}px`;
}
const svg = $("#gpus");
svg.addEventListener("mouseover", (e) => showTip(e.target));
svg.addEventListener("focusin", (e) => showTip(e.target));
svg.addEventListener("mouseout", () => { tip.hidden = true; });
svg.addEventListener("focusout", () => { tip.hidden = true; });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") tip.hidden = true; });

// --- routing and the URL -------------------------------------------------------------------
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const [tab, step] = path.split("/");
  return { tab: ["lesson", "playground", "plots", "cheatsheet"].includes(tab) ? tab : "lesson", step: step ? Number(step) : null, query };
}

function updateUrl() {
  const q = toQuery(state);
  const path = route.tab === "lesson" && route.step ? `lesson/${route.step}` : route.tab;
  const url = `#/${path}${q ? `?${q}` : ""}`;
  if (location.hash !== url) history.replaceState(null, "", url);
  const share = new URL(location.href);
  share.hash = `/playground${q ? `?${q}` : ""}`;
  $("#share-url").value = share.toString();
}

let lesson;

function show(tab) {
  route.tab = tab;
  for (const t of ["lesson", "playground", "plots", "cheatsheet"]) {
    document.querySelector(`[data-tab="${t}"]`).setAttribute("aria-current", t === tab ? "page" : "false");
  }
  $("#lesson-panel").hidden = tab !== "lesson";
  $("#sim-panel").hidden = !(tab === "lesson" || tab === "playground");
  $("#plots-panel").hidden = tab !== "plots";
  $("#cheatsheet-panel").hidden = tab !== "cheatsheet";
  document.body.dataset.tab = tab;
  if (tab === "plots" && last) drawPlots(state, last);
}

async function onRoute(initial = false) {
  const r = parseHash();
  const fromUrl = fromQuery(r.query);
  show(r.tab);
  if (r.tab === "lesson") {
    const id = r.step || lesson.current();
    route.step = id;
    // a lesson link with state restores it; otherwise the step sets its scenario
    lesson.open(id, Object.keys(fromUrl).length ? fromUrl : null, initial);
  } else {
    route.step = null;
    if (initial || Object.keys(fromUrl).length) setState({ ...DEFAULTS, ...fromUrl });
    else updateUrl();
  }
}

$("#share-copy").addEventListener("click", async () => {
  const input = $("#share-url");
  input.select();
  try { await navigator.clipboard.writeText(input.value); } catch { document.execCommand?.("copy"); }
});

async function main() {
  await loadCatalogs();
  lesson = new Lesson({ setState, getState, onStep: (id) => { route.step = id; updateUrl(); } });
  await lesson.load();
  window.addEventListener("hashchange", () => onRoute(false));
  await onRoute(true);
}

main();
