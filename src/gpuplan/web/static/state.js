// The state of the controls, its URL encoding, and the API request it becomes.
// No arithmetic about memory happens here: the engine answers every question.

export const DEFAULTS = Object.freeze({
  mode: "serve",
  model: "llama-3.1-8b",
  config: "",
  kv_heads: "",
  dtype: "auto",
  kv_dtype: "auto",
  context: 4096,
  users: 1,
  gpu: "h100-sxm",
  gpu_memory: "", // "" = as the driver reports it, "marketed", or a typed size ("80GB")
  server_gpus: 8,
  gpus: "",
  tp: "",
  pp: "",
  dp: "",
  headroom: 0.9,
  units: "GB",
  method: "full",
  lora_rank: 16,
  zero: "auto", // "0".."3", or "auto": the planner's choice
  micro_batch: 1,
  seq: 4096,
  checkpointing: "auto", // "auto" (the planner's choice), "none" or "full"
});

const CHECKPOINTING = { true: "full", false: "none", 1: "full", 0: "none", null: "auto", undefined: "auto", selective: "full" };

// A checkpointing value as the controls hold it: "auto", "none" or "full" (old links said true/false).
export function checkpointingOf(v) {
  const s = String(v);
  if (["auto", "none", "full"].includes(s)) return s;
  return CHECKPOINTING[s] || DEFAULTS.checkpointing;
}

const NUMBERS = new Set(["context", "users", "server_gpus", "headroom", "micro_batch", "seq", "lora_rank"]);
export const PASTED = "__config__";

// One API field -> the state: what a lesson scenario or a fix's `change` says, as the controls hold it.
export function fromApi(change) {
  const out = {};
  for (const [k, v] of Object.entries(change || {})) {
    if (k === "mode") out.mode = v;
    else if (k === "overrides") out.kv_heads = v && v.num_key_value_heads ? String(v.num_key_value_heads) : "";
    else if (k === "zero") out.zero = v === null || v === undefined ? "auto" : String(v);
    else if (k === "checkpointing") out.checkpointing = checkpointingOf(v);
    else if (["dtype", "kv_dtype"].includes(k)) out[k] = v === null || v === undefined ? "auto" : String(v);
    else if (k in DEFAULTS) out[k] = v === null || v === undefined ? DEFAULTS[k] : v;
  }
  return out;
}

export function normalise(partial) {
  const s = { ...DEFAULTS };
  for (const [k, v] of Object.entries(partial || {})) {
    if (!(k in DEFAULTS)) continue;
    if (k === "checkpointing") s[k] = checkpointingOf(v);
    else if (NUMBERS.has(k)) s[k] = v === "" || v === null || !Number.isFinite(Number(v)) ? DEFAULTS[k] : Number(v);
    else s[k] = v === null || v === undefined ? "" : String(v);
  }
  if (!["0", "1", "2", "3", "auto"].includes(s.zero)) s.zero = DEFAULTS.zero;
  return s;
}

// --- URL: every non-default field, so a link reproduces the state exactly --------------------
export function toQuery(state) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) {
    if (String(v) === String(DEFAULTS[k])) continue;
    q.set(k, k === "config" ? b64encode(v) : String(v));
  }
  return q.toString();
}

export function fromQuery(text) {
  const q = new URLSearchParams(text);
  const out = {};
  for (const [k, v] of q.entries()) {
    if (!(k in DEFAULTS)) continue;
    out[k] = k === "config" ? b64decode(v) : v;
  }
  return out;
}

function b64encode(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function b64decode(text) {
  try {
    const bin = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch {
    return "";
  }
}

// --- the API request ----------------------------------------------------------------------
function intOrNull(v) {
  if (v === "" || v === null || v === undefined) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : v; // let the API refuse nonsense with its own message
}

export class InputError extends Error {}

export function modelPart(state) {
  const body = {};
  if (state.model === PASTED) {
    let config;
    try {
      config = JSON.parse(state.config || "");
    } catch (err) {
      throw new InputError(`the pasted config.json is not valid JSON (${err.message})`);
    }
    if (config === null || typeof config !== "object" || Array.isArray(config)) {
      throw new InputError("the pasted config.json must be a JSON object");
    }
    body.config = config;
  } else {
    body.model = state.model;
  }
  if (state.kv_heads !== "" && state.kv_heads !== null) {
    body.overrides = { num_key_value_heads: intOrNull(state.kv_heads) };
  }
  return body;
}

export function toRequest(state) {
  const gpus = state.gpus === "" ? null : state.gpus === "auto" ? "auto" : intOrNull(state.gpus);
  const common = {
    ...modelPart(state),
    gpu: state.gpu,
    gpu_memory: state.gpu_memory === "" ? null : state.gpu_memory,
    server_gpus: state.server_gpus,
    headroom: state.headroom,
    units: state.units,
    gpus,
    tp: intOrNull(state.tp),
    pp: intOrNull(state.pp),
    dtype: state.dtype === "auto" ? null : state.dtype,
  };
  if (state.mode === "train") {
    return {
      path: "/api/train",
      body: {
        ...common,
        dp: intOrNull(state.dp),
        zero: state.zero === "auto" ? null : Number(state.zero),
        micro_batch: state.micro_batch,
        seq: state.seq,
        checkpointing: state.checkpointing === "auto" ? null : state.checkpointing,
        method: state.method,
        lora_rank: state.method === "full" ? null : state.lora_rank,
      },
    };
  }
  return {
    path: "/api/serve",
    body: {
      ...common,
      kv_dtype: state.kv_dtype === "auto" ? null : state.kv_dtype,
      context: state.context,
      users: state.users,
    },
  };
}

export async function post(path, body, signal) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  let data;
  try {
    data = await response.json();
  } catch {
    data = { detail: `the server answered ${response.status}` };
  }
  return { ok: response.ok, status: response.status, data };
}

// Display formatting only (the engine's numbers, in the reader's unit).
export function fmt(bytes, units = "GB", digits = 2) {
  if (bytes === null || bytes === undefined) return "—";
  const scale = units === "GiB" ? 2 ** 30 : 1e9;
  return `${(bytes / scale).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })} ${units}`;
}

export function count(n) {
  if (n === null || n === undefined) return "—";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 0 });
}

// An engine error in the page's words: the names of the controls, not of CLI flags.
const FLAGS = [
  [/; pass --tp and --pp explicitly/g, "; set TP and PP under All controls"],
  [/--micro-batch/g, "micro-batch"],
  [/--checkpointing full/g, "activation checkpointing"],
  [/--gpu-memory/g, "Memory per GPU"],
  [/--gpus/g, "GPUs"],
  [/--tp/g, "TP"],
  [/--pp/g, "PP"],
  [/--dp/g, "DP"],
  [/--seq/g, "sequence length"],
  [/--cp\b/g, "context parallelism"],
  [/ × cp\b/g, ""],
  [/--[a-z-]+/g, (m) => m.slice(2).replaceAll("-", " ")],
];

export function plainError(message) {
  let text = String(message || "");
  for (const [re, to] of FLAGS) text = text.replace(re, to);
  return text;
}
