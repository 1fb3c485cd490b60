// gpuplan web: the controls, the live simulation, routing and the shareable URL.
import { DEFAULTS, PASTED, InputError, count, fmt, fromApi, fromQuery, normalise, plainError, post, toQuery, toRequest } from "./state.js";
import { drawServer, drawTimeline, legend } from "./sim.js";
import { Lesson } from "./lesson.js";
import { renderHeadline } from "./headline.js";
import { drawPlots } from "./plots.js";

const $ = (sel) => document.querySelector(sel);
const form = $("#controls");
let state = normalise({});
let route = { tab: "lesson", step: null };
let seq = 0;
let timer = null;
let inflight = null;
let catalog = { models: [], gpus: [] };
let lesson;
let stepScale = 0; // the picture's top within a lesson step: it only grows, so blocks keep their size
let shown = null; // { data, cmp, body } last drawn
let previous = null; // the last request that drew, for "what changed"
let inputAt = null;
let renders = 0;
export let last = null; // the latest engine response shown

// --- catalogs -----------------------------------------------------------------------------
async function loadCatalogs() {
  const [models, gpus, precisions, features] = await Promise.all(
    ["/api/models", "/api/gpus", "/api/precisions", "/api/features"].map((p) => fetch(p).then((r) => r.json())),
  );
  catalog = { models: models.models, gpus: gpus.gpus };
  const list = $("#model-list");
  for (const m of models.models) {
    list.append(new Option(`${m.attention}, ${m.layers} layers`, m.id));
    if (m.hf_id) list.append(new Option(m.id, m.hf_id));
  }
  const gpu = $("#c-gpu");
  for (const g of gpus.gpus) gpu.append(new Option(g.name, g.id));
  fillPrecisions(precisions.precisions);
  const h100 = gpus.gpus.find((g) => g.id === "h100-sxm");
  if (h100 && h100.driver_total_bytes) {
    $("#cheat-memory").textContent = `The lesson counts a GPU at its marketed round figure: ${fmt(h100.marketed_bytes, "GB", 0)} for an H100. The driver reports ${fmt(h100.driver_total_bytes)} (${count(h100.driver_total_bytes / 2 ** 20)} MiB), what a process can allocate: the playground's default. Type any figure to override both.`;
  }
  window.gpuplanFeatures = features;
}

// The precision menus: the common formats first, the rest grouped by where they come from.
const PRECISION_GROUPS = [
  ["Common", (id) => ["fp32", "bf16", "fp16", "fp8", "int8", "int4"].includes(id)],
  ["Checkpoint formats (GPTQ, AWQ, fp8 scaling)", (id) => /^(fp8-|int8-|int4-|gptq|awq)/.test(id)],
  ["bitsandbytes (QLoRA)", (id) => /^(nf4|bnb)/.test(id)],
  ["Microscaling (Blackwell)", (id) => /^(mxfp4|nvfp4)/.test(id)],
  ["GGUF (llama.cpp)", () => true],
];

function fillPrecisions(precisions) {
  const dtype = $("#c-dtype"), kv = $("#c-kvdtype");
  dtype.append(new Option("the checkpoint's own", "auto"));
  kv.append(new Option("the engine's default", "auto"));
  const groups = new Map(PRECISION_GROUPS.map(([name]) => [name, []]));
  for (const p of precisions) groups.get(PRECISION_GROUPS.find(([, test]) => test(p.id))[0]).push(p);
  for (const [name, members] of groups) {
    if (!members.length) continue;
    const group = document.createElement("optgroup");
    group.label = name;
    for (const p of members) group.append(new Option(`${p.id} · ${p.bytes_per_param} B`, p.id));
    dtype.append(group);
  }
  const kvGroup = document.createElement("optgroup");
  kvGroup.label = "KV cache";
  for (const p of precisions) if (p.kv && !/^(q\d|iq|tq)/.test(p.id)) kvGroup.append(new Option(`${p.id} · ${p.bytes_per_param} B`, p.id));
  kv.append(kvGroup);
}

function gpuInfo(id) {
  return catalog.gpus.find((g) => g.id === id) || null;
}

function modelInfo(id) {
  return catalog.models.find((m) => m.id === id) || null;
}

// --- controls <-> state ---------------------------------------------------------------------
const FIELDS = ["model", "config", "kv_heads", "dtype", "kv_dtype", "context", "users", "gpu",
  "server_gpus", "gpus", "tp", "pp", "dp", "headroom", "units", "method", "lora_rank", "zero", "micro_batch", "seq", "checkpointing"];

function gpuValue(id) {
  const sel = $("#c-gpu");
  if ([...sel.options].some((o) => o.value === id)) return id;
  return { h100: "h100-sxm", a100: "a100-80gb" }[id] || id;
}

function basisOf(memory) {
  return memory === "" ? "driver" : memory === "marketed" ? "marketed" : "custom";
}

function describeBasis() {
  const g = gpuInfo(gpuValue(state.gpu));
  const sel = $("#c-membasis");
  if (g) {
    sel.options[0].text = g.driver_total_bytes ? `as the driver reports it (${fmt(g.driver_total_bytes)})` : `as marketed (${fmt(g.marketed_bytes, "GB", 0)}; no driver figure)`;
    sel.options[1].text = `as marketed (${fmt(g.marketed_bytes, "GB", 0)})`;
  }
  const custom = sel.value === "custom";
  $("#c-gpumem").hidden = !custom;
  $("#c-gpumem-label").hidden = !custom;
}

function syncRanges() {
  const max = maxContext();
  const range = $("#c-context-range");
  range.max = String(max ? Math.log2(max) : 20);
  range.value = String(Math.log2(state.context));
  $("#c-context-out").textContent = count(state.context);
  $("#c-users-range").value = String(Math.log2(state.users));
  $("#c-users-out").textContent = count(state.users);
  const pasted = state.model === PASTED;
  $("#config-box").hidden = !pasted;
  $("#c-model").hidden = pasted;
  $("#paste-toggle").textContent = pasted ? "or type a model name" : "or paste a config.json";
  document.body.dataset.mode = state.mode;
  document.body.dataset.method = state.method;
  describeBasis();
  contextNotes();
}

function maxContext() {
  if (state.model === PASTED) return last?.model?.max_context || null;
  return modelInfo(state.model)?.max_context || null;
}

function contextNotes() {
  const max = maxContext();
  const name = state.model === PASTED ? "this model" : state.model;
  const say = (node, value, what) => {
    const beyond = Boolean(max && value > max);
    node.hidden = !beyond;
    if (beyond) node.textContent = `Beyond ${name}'s maximum of ${count(max)} tokens (its max_position_embeddings): the model cannot attend that far, so this ${what} is arithmetic only.`;
  };
  say($("#context-note"), state.context, "bill");
  say($("#seq-note"), state.seq, "training bill");
}

function writeControls() {
  for (const name of FIELDS) {
    const input = form.elements[name];
    if (!input) continue;
    if (name === "model" && state.model === PASTED) continue;
    input.value = name === "gpu" ? gpuValue(state.gpu) : String(state[name]);
  }
  $("#c-membasis").value = basisOf(state.gpu_memory);
  $("#c-gpumem").value = basisOf(state.gpu_memory) === "custom" ? state.gpu_memory : "";
  for (const r of form.querySelectorAll('input[name="mode"]')) r.checked = r.value === state.mode;
  syncRanges();
}

function readControls() {
  const next = {};
  for (const name of FIELDS) {
    const input = form.elements[name];
    if (input) next[name] = input.value;
  }
  if (state.model === PASTED) next.model = PASTED;
  const basis = $("#c-membasis").value;
  next.gpu_memory = basis === "custom" ? $("#c-gpumem").value.trim() : basis === "marketed" ? "marketed" : "";
  next.mode = form.querySelector('input[name="mode"]:checked').value;
  return normalise(next);
}

function roundSlider(value) {
  const n = 2 ** Number(value);
  return n >= 1024 ? Math.round(n / 256) * 256 : Math.max(1, Math.round(n));
}

// A model name is asked for once it is complete: a catalog name or id picked from the list at
// once, anything else typed when the field is left (or Enter).
function knownModel(name) {
  return catalog.models.some((m) => m.id === name || m.hf_id === name);
}

form.addEventListener("input", (event) => {
  const id = event.target.id;
  if (id === "c-model" && !knownModel(event.target.value.trim())) return;
  inputAt = performance.now();
  lesson?.acted();
  if (id === "c-context-range") form.elements.context.value = roundSlider(event.target.value);
  if (id === "c-users-range") form.elements.users.value = roundSlider(event.target.value);
  setState(readControls(), { fromControls: true });
});
form.addEventListener("change", (event) => {
  if (event.target.id === "c-membasis") describeBasis();
  if (event.target.id === "c-model" && event.target.value.trim() !== state.model) {
    inputAt = performance.now();
    setState(readControls(), { fromControls: true });
  }
});
$("#paste-toggle").addEventListener("click", () => {
  const next = { ...state };
  next.model = state.model === PASTED ? DEFAULTS.model : PASTED;
  setState(next);
  if (next.model === PASTED) $("#c-config").focus();
});
form.addEventListener("submit", (e) => e.preventDefault());
$("#speed-box").addEventListener("toggle", () => showSpeed(shown && shown.body));

export function setState(next, { fromControls = false, newStep = false } = {}) {
  state = normalise(next);
  if (newStep) {
    stepScale = 0;
    previous = null;
  }
  if (!fromControls) writeControls();
  else syncRanges();
  updateUrl();
  schedule();
}

// --- asking the engine ----------------------------------------------------------------------
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 0);
}

function lessonStep() {
  return route.tab === "lesson" && lesson ? lesson.step() : null;
}

async function refresh() {
  const mine = ++seq;
  document.body.dataset.busy = "1";
  let request;
  try {
    request = toRequest(state);
  } catch (err) {
    if (err instanceof InputError) return showError(err.message);
    throw err;
  }
  if (inflight) inflight.abort();
  inflight = new AbortController();
  const signal = inflight.signal;
  const step = lessonStep();
  const mode = state.mode;
  // the bill first; the ways out (several more engine calls) only for a plan that does not fit
  const main = post(request.path, { ...request.body, fixes: false }, signal);
  const explore = step && step.explore && step.scenario.mode === mode ? step.explore : null;
  const before = previous && previous.mode === mode && JSON.stringify(previous.body) !== JSON.stringify(request.body) ? previous : null;
  // the extras start once the bill is in, so they never slow the picture down
  const after = main.then(() => null, () => null);
  const cmpCall = explore
    ? after.then(() => post("/api/lesson/compare", { base: { ...request.body, mode }, variants: explore.variants, reference: explore.reference || 0 }, signal))
    : Promise.resolve(null);
  const changeCall = before
    ? after.then(() => post("/api/lesson/change", { before: { ...before.body, mode }, after: { ...request.body, mode } }, signal))
    : Promise.resolve(null);
  // Paint as soon as the bill arrives; the comparison, the caption and the ways out follow.
  // Until the comparison for this very request is in, the picture keeps the step's scale and
  // shows the variants' figures without their ratios to the screen.
  let cmp = null, change = null, settled = false;
  const extras = Promise.all([cmpCall, changeCall]).then(([c, ch]) => {
    cmp = c && c.ok ? c.data : null;
    change = ch && ch.ok ? ch.data : null;
    settled = true;
  });
  extras.catch(() => {}); // aborted by a newer input: nothing to draw
  let answer;
  try {
    answer = await main;
    // a step's first picture waits for the comparison: it fixes the step's vertical scale
    if (explore && stepScale === 0) await extras;
  } catch (err) {
    if (err.name === "AbortError") return;
    return showError(`cannot reach the gpuplan server (${err.message})`);
  }
  if (mine !== seq) return;
  if (!answer.ok) return showError(answer.data.detail || `error ${answer.status}`, answer.status);
  previous = { mode, body: request.body };
  answer.data.fixes = [];
  const held = settled ? cmp : shown && shown.explore === explore && shown.cmp ? { ...shown.cmp, current: null } : null;
  render(answer.data, held, settled ? change : null, request.body, explore);
  try {
    if (!settled) {
      await extras;
      if (mine !== seq) return;
      shown = { ...shown, cmp, change };
      paint();
    }
    if (!answer.data.fits) {
      // the ways out cost several more plans: ask once the learner pauses
      await new Promise((resolve) => setTimeout(resolve, 150));
      if (mine !== seq) return;
      const full = await post(request.path, request.body, signal);
      if (mine !== seq) return;
      answer.data.fixes = full.ok ? full.data.fixes || [] : [];
      paint();
    }
  } catch (err) {
    if (err.name === "AbortError") return;
  }
  if (mine !== seq) return;
  document.body.dataset.busy = "";
  if (route.tab === "plots") drawPlots(state, answer.data);
}

function stale(on) {
  for (const id of ["#headline", "#gpus", "#legend", "#fixes", "#details", "#timeline"]) $(id).classList.toggle("stale", on);
  document.body.dataset.error = on ? "1" : "";
}

// Ways out of a refusal: each a change of the controls the page can make in one click.
function errorWaysOut(message) {
  const out = [];
  const auto = (k) => state[k] === "" || state[k] === "auto";
  if (state.model === PASTED || /unknown model/.test(message)) {
    if (state.model !== PASTED) out.push(["Paste its config.json", { model: PASTED }]);
    return out;
  }
  if (state.mode === "train") {
    const knobs = ["zero", "checkpointing", "gpus", "tp", "pp", "dp"].filter((k) => !auto(k));
    if (knobs.length) out.push([`Let the planner choose ${knobs.map((k) => k === "zero" ? "ZeRO" : k === "checkpointing" ? "checkpointing" : k.toUpperCase()).join(", ")}`, Object.fromEntries(knobs.map((k) => [k, k === "zero" || k === "checkpointing" ? "auto" : ""]))]);
    if (state.method !== "qlora") out.push(["Fine-tune with QLoRA (4-bit base, small adapters)", { method: "qlora" }]);
    if (state.seq > 512) out.push([`Halve the sequence (${count(state.seq / 2)} tokens)`, { seq: Math.round(state.seq / 2) }]);
  } else {
    if (!auto("gpus") || !auto("tp") || !auto("pp")) out.push(["Let the planner choose the GPUs and the layout", { gpus: "", tp: "", pp: "" }]);
    if (state.dtype !== "fp8") out.push(["Weights in fp8", { dtype: "fp8" }]);
    if (state.kv_dtype !== "fp8") out.push(["KV cache in fp8", { kv_dtype: "fp8" }]);
  }
  return out;
}

function showError(message, status) {
  document.body.dataset.busy = "";
  const v = $("#verdict");
  v.className = status === 501 ? "verdict unavailable" : "verdict error";
  v.replaceChildren();
  const b = document.createElement("strong");
  b.textContent = status === 501 ? "Not yet available: " : "Cannot size this: ";
  v.append(b, plainError(message), document.createElement("br"));
  // a picture of another mode (serving under a Train verdict) would mislead: clear it
  const keep = shown && shown.data.mode === state.mode;
  if (!keep) clearPicture();
  const hint = document.createElement("small");
  const reset = lessonStep() ? ", or Reset step" : "";
  hint.textContent = keep ? `The picture below is the last plan that worked, faded. Change the input${reset}.` : `Change the input${reset}.`;
  v.append(hint);
  const ways = errorWaysOut(String(message));
  if (ways.length) {
    const box = document.createElement("div");
    box.className = "error-ways";
    for (const [label, change] of ways) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "fix";
      button.textContent = label;
      button.addEventListener("click", () => { lesson?.acted(); setState({ ...state, ...change }); });
      box.append(button);
    }
    v.append(box);
  }
  stale(keep);
  document.body.dataset.error = "1";
  $("#change-caption").textContent = "";
  document.body.dataset.rendered = String(++renders);
}

function clearPicture() {
  shown = null;
  for (const id of ["#headline", "#legend", "#fixes", "#timeline", "#bill tbody", "#facts", "#trail", "#notes"]) $(id).replaceChildren();
  for (const g of $("#gpus").querySelectorAll("g")) g.replaceChildren();
  $("#timeline").hidden = true;
}

function planWords(data) {
  if (data.mode === "serve") {
    if (data.gpus === 1) return `1 GPU (${data.gpu.name})`;
    return `${data.gpus} × ${data.gpu.name}, each layer split ${data.tp} ways (tensor parallel)${data.pp > 1 ? ` in ${data.pp} pipeline stages` : ""}`;
  }
  if (data.gpus === 1) return `1 GPU (${data.gpu.name}, ${data.layout.describe})`;
  return `${data.gpus} × ${data.gpu.name} (${data.layout.describe})`;
}

function verdict(data, masked) {
  const v = $("#verdict");
  const units = data.units || "GB";
  const over = data.view?.overflow || { status: data.fits ? "fits" : "over_headroom" };
  const memory = data.gpu.memory_bytes;
  const head = planWords(data);
  if (masked) {
    v.className = "verdict masked";
    v.textContent = lesson.maskedWords();
    return;
  }
  const pct = Math.round((data.per_gpu_total_bytes / memory) * 100);
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
    v.textContent = `Does not fit: no room for one ${count(data.context)}-token conversation's KV cache (${head}).`;
  }
  if (data.mode === "serve" && !data.fits && data.max_concurrent_sequences < data.users) {
    v.textContent += ` KV room for ${count(data.max_concurrent_sequences)} of ${count(data.users)} user(s).`;
  }
}

// --- speed, when asked: the layout's TTFT / TPOT / throughput (api/serving_speed.py) ----------
const ms = (s) => `${(s * 1e3).toLocaleString("en", { maximumFractionDigits: 1 })} ms`;
let speedSeq = 0;

async function showSpeed(body) {
  const out = $("#speed-out");
  if (!$("#speed-box").open) return;
  if (!body || state.mode !== "serve") return void (out.textContent = "Speed is timed for a serving plan.");
  const mine = ++speedSeq;
  out.textContent = "timing…";
  const r = await post("/api/serve", { ...body, fixes: false, speed: {} }).catch(() => null);
  if (mine !== speedSeq) return;
  if (!r || !r.ok) return void (out.textContent = r ? r.data.detail || `error ${r.status}` : "cannot reach the server");
  out.replaceChildren(speedTable(r.data.speed));
}

function speedTable(sp) {
  const box = document.createElement("div");
  const t = document.createElement("table");
  t.id = "speed";
  t.innerHTML = "<thead><tr><th scope='col'></th><th scope='col'>mean</th><th scope='col'>median</th><th scope='col'>p99</th></tr></thead>";
  const tb = document.createElement("tbody");
  for (const [key, label] of [["ttft_s", "TTFT"], ["tpot_s", "TPOT"], ["itl_s", "ITL"]]) {
    const tr = document.createElement("tr");
    for (const text of [label, ...["mean", "median", "p99"].map((k) => ms(sp[key][k]))]) tr.append(Object.assign(document.createElement("td"), { textContent: text }));
    tb.append(tr);
  }
  t.append(tb);
  const ld = sp.load, ph = sp.breakdown.phases_s;
  const parts = (p) => ["compute", "memory", "comm", "overhead"].map((k) => `${k} ${p[k].toFixed(2)} s`).join(", ");
  const lines = [
    `${ld.concurrency} requests in flight, ${count(ld.prompt_tokens)} → ${count(ld.output_tokens)} tokens, ${ld.num_prompts} prompts, tp=${sp.tp} pp=${sp.pp}, ${sp.engine} scheduler.`,
    `Throughput: ${count(Math.round(sp.output_tokens_per_s))} output tokens/s (${count(Math.round(sp.total_tokens_per_s))} in all).`,
    ...Object.entries(ph).map(([name, p]) => `${name} ${(p.share * 100).toFixed(0)} % of the GPU time: ${parts(p)}.`),
    `Queueing before prefill: mean ${ms(sp.breakdown.queueing_s.mean)}.`,
    `Kernel figures (${sp.sources.kernel_architecture}): ${sp.sources.kernel_source_keys.join(", ")}; ${sp.sources.fitted}.`,
    ...sp.notes,
  ];
  box.append(t, ...lines.map((text) => Object.assign(document.createElement("p"), { textContent: text })));
  return box;
}

function render(data, cmp, change, body, explore) {
  last = data;
  shown = { data, cmp, change, body, explore };
  stale(false);
  paint();
  showSpeed(body);
  document.body.dataset.rendered = String(++renders);
  if (inputAt !== null) {
    const started = inputAt;
    inputAt = null;
    requestAnimationFrame(() => {
      document.body.dataset.latency = String(Math.round(performance.now() - started));
    });
  }
  if (!window.gpuplanFirstRender) window.gpuplanFirstRender = performance.now();
}

// Draw what `shown` holds (again after a drill reveals its numbers, or on resize).
function paint() {
  if (!shown) return;
  const { data, cmp, change, body, explore } = shown;
  const units = data.units || "GB";
  const step = lessonStep();
  const masked = Boolean(step && lesson.masked());
  document.body.dataset.masked = masked ? "1" : "";
  if (step) stepScale = Math.max(stepScale, cmp?.scale_bytes || 0, data.gpu.memory_bytes, data.per_gpu_total_bytes);
  const scale = step ? stepScale : null;
  verdict(data, masked);
  renderHeadline($("#headline"), step ? step.headlines : ["total"], data, cmp, explore, body, { masked });
  const kinds = drawServer($("#gpus"), data, { scale, masked });
  legend($("#legend"), data.per_gpu.items, kinds, { masked });
  $("#change-caption").textContent = change && change.caption && !masked ? `What changed: ${change.caption}` : "";
  drawTimeline($("#timeline"), data, { scale, masked });
  renderFixes(data, units, masked);
  renderDetails(data, units);
  contextNotes();
  const kvNote = $("#kv-note");
  kvNote.hidden = !(data.mode === "serve" && data.kv_dtype) || masked;
  if (!kvNote.hidden) kvNote.textContent = `The KV cache is held in ${data.kv_dtype}${state.kv_dtype === "auto" ? " (the engine's default: the weights' precision does not set it)" : ""}.`;
}

function renderFixes(data, units, masked) {
  const fixes = $("#fixes");
  fixes.replaceChildren();
  if (masked || !data.fixes || !data.fixes.length) return;
  const h = document.createElement("h3");
  h.textContent = data.mode === "serve" ? "Ways out, each checked by the engine" : "Ways out for this training run, each checked by the engine";
  fixes.append(h);
  const list = document.createElement("ul");
  data.fixes.forEach((fix, n) => {
    const li = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = n === 0 ? "fix cheapest" : "fix";
    button.dataset.answer = fix.answer;
    const tag = document.createElement("span");
    tag.className = "tag";
    tag.textContent = fix.title || fix.answer;
    const what = document.createElement("span");
    what.textContent = `${fix.label}: ${fix.gpus} GPU${fix.gpus > 1 ? "s" : ""}, ${fmt(fix.per_gpu_total_bytes, units)} of ${fmt(fix.memory_bytes, units, 0)} per GPU`;
    button.append(tag, what);
    button.addEventListener("click", () => applyFix(fix.change));
    li.append(button);
    list.append(li);
  });
  fixes.append(list);
}

function renderDetails(data, units) {
  const items = data.per_gpu.items;
  const memory = data.gpu.memory_bytes;
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
  total.lastChild.textContent = `budget ${fmt(data.budget_bytes, units)} (${Math.round(data.headroom * 100)} % of ${fmt(memory, units)}, ${data.gpu.memory_basis === "driver" ? "as the driver reports it" : data.gpu.memory_basis === "marketed" ? "as marketed" : "as typed"})`;
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
  } else {
    add("Model states per GPU", fmt(data.model_states_bytes, units), "model-states");
    add("Tokens per second", count(data.tokens_per_second));
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
}

function applyFix(change) {
  const next = { ...state, ...fromApi(change) };
  for (const k of ["gpus", "tp", "pp", "dp"]) {
    if (k in change) next[k] = change[k] === null ? "" : String(change[k]);
  }
  if ("gpu_memory" in change) next.gpu_memory = change.gpu_memory === null ? "" : String(change.gpu_memory);
  inputAt = performance.now();
  setState(next);
}

// --- tooltip: the formula with its numbers, kept inside the window -----------------------------
const tip = $("#tooltip");
function showTip(target) {
  if (!last || !target?.dataset?.key || document.body.dataset.masked === "1") return;
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
  const w = tip.offsetWidth, h2 = tip.offsetHeight;
  const vw = document.documentElement.clientWidth, vh = window.innerHeight;
  let left = box.right + 8;
  if (left + w > vw - 4) left = Math.max(4, box.left - w - 8);
  let top = Math.max(4, Math.min(box.top, vh - h2 - 4));
  if (left < 4) left = 4;
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}
const svg = $("#gpus");
svg.addEventListener("mouseover", (e) => showTip(e.target));
svg.addEventListener("focusin", (e) => showTip(e.target));
svg.addEventListener("mouseout", () => { tip.hidden = true; });
svg.addEventListener("focusout", () => { tip.hidden = true; });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") tip.hidden = true; });
let drawnWidth = 0;
new ResizeObserver(() => {
  const w = $("#gpus").clientWidth;
  if (w && w !== drawnWidth) { drawnWidth = w; paint(); }
}).observe($("#gpus"));

// --- routing and the URL -------------------------------------------------------------------
const TABS = ["lesson", "playground", "plots", "cheatsheet"];

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const [tab, step] = path.split("/");
  return { tab: TABS.includes(tab) ? tab : "lesson", step: step ? Number(step) : null, query };
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

function show(tab) {
  route.tab = tab;
  for (const t of TABS) {
    const link = document.querySelector(`header nav a[data-tab="${t}"]`);
    if (t === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const sim = tab === "lesson" || tab === "playground";
  $("#workspace").hidden = !sim;
  $("#details").hidden = !sim;
  $("#lesson-panel").hidden = tab !== "lesson";
  $("#lesson-foot").hidden = tab !== "lesson";
  $("#plots-panel").hidden = tab !== "plots";
  $("#cheatsheet-panel").hidden = tab !== "cheatsheet";
  document.body.dataset.tab = tab;
  if (tab !== "lesson") form.classList.remove("show-all");
  if (tab === "plots" && last) drawPlots(state, last);
}

async function onRoute(initial = false) {
  const r = parseHash();
  const fromUrl = fromQuery(r.query);
  const wasLesson = route.tab === "lesson";
  show(r.tab);
  if (r.tab === "lesson") {
    const id = r.step || lesson.current();
    // the Lesson tab while on the lesson keeps the state; a link to a step opens it afresh
    const same = !initial && wasLesson && !r.step && !Object.keys(fromUrl).length;
    route.step = id;
    if (!same) lesson.open(id, Object.keys(fromUrl).length ? fromUrl : null);
  } else {
    route.step = null;
    if (initial || Object.keys(fromUrl).length) setState({ ...DEFAULTS, ...fromUrl }, { newStep: true });
    else {
      updateUrl();
      paint();
    }
  }
}

$("#share-copy").addEventListener("click", async () => {
  const input = $("#share-url");
  input.select();
  try { await navigator.clipboard.writeText(input.value); } catch { document.execCommand?.("copy"); }
});

async function main() {
  await loadCatalogs();
  lesson = new Lesson({ setState, onStep: (id) => { route.step = id; updateUrl(); }, rerender: paint });
  await lesson.load();
  window.addEventListener("hashchange", () => onRoute(false));
  await onRoute(true);
}

export { fromApi };
main();
