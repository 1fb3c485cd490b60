// The figures a lesson step puts first, in the picture. Each comes from the engine: the answer on
// screen (`data`) or POST /api/lesson/compare (`cmp`: the step's variants side by side, with the
// ratios the server computed). Nothing here is arithmetic; it chooses and formats.
import { count, fmt } from "./state.js";

function chip(kind, label, value, sub, extra = "") {
  const span = document.createElement("span");
  span.className = `chip ${extra}`.trim();
  span.dataset.headline = kind;
  const b = document.createElement("b");
  b.textContent = label;
  const v = document.createElement("span");
  v.className = "value";
  v.textContent = value;
  span.append(b, v);
  if (sub) {
    const s = document.createElement("small");
    s.textContent = sub;
    span.append(s);
  }
  return span;
}

// "2 × tp 1's", "−33 % vs tp 1": a ratio to the step's reference, in words ("" when equal:
// the chip then says what the figure is made of).
function versus(r, label) {
  if (!r) return "";
  const x = r.ratio;
  if (Math.abs(x - 1) < 0.005) return "";
  return x >= 1 ? `${x.toLocaleString("en-US", { maximumFractionDigits: 2 })} × ${label}'s` : `${r.change_pct > 0 ? "+" : "−"}${Math.abs(r.change_pct)} % vs ${label}`;
}

function onGpus(data) {
  const name = data.gpu.name.replace(/^NVIDIA /, "");
  return data.gpus === 1 ? `on 1 GPU (${name})` : `on ${count(data.gpus)} GPUs (${name})`;
}

function pct(r) {
  if (!r) return "";
  return `${r.change_pct > 0 ? "+" : r.change_pct < 0 ? "−" : "±"}${Math.abs(r.change_pct).toLocaleString("en-US")} %`;
}

// Which variant of the step the screen shows (its fields all equal the request's), or -1.
export function currentVariant(variants, body) {
  const same = (a, b) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
  return (variants || []).findIndex((v) => Object.entries(v).every(([k, val]) => same(body[k], val)));
}

function byCategory(data, category) {
  return data.per_gpu.items.filter((i) => i.category === category);
}

export function renderHeadline(node, kinds, data, cmp, explore, body, { masked = false } = {}) {
  node.replaceChildren();
  if (!kinds || !kinds.length || !data) return;
  const units = data.units || "GB";
  const now = cmp?.current;
  const refLabel = explore && cmp ? explore.labels?.[cmp.reference] : null;
  const at = currentVariant(explore?.variants, body);
  const hidden = "?";
  for (const kind of kinds) {
    if (kind === "total") {
      const basis = data.gpu.memory_basis === "marketed" ? "marketed" : data.gpu.memory_basis === "driver" ? "as the driver reports" : "typed";
      node.append(chip(kind, "Per GPU", masked ? hidden : fmt(data.per_gpu_total_bytes, units),
        `of ${fmt(data.gpu.memory_bytes, units, data.gpu.memory_bytes % 1e9 ? 2 : 0)} (${basis})${masked ? "" : ` ${onGpus(data)}`}`));
    } else if (kind === "weights") {
      const w = byCategory(data, "weights");
      const split = data.pp > 1 ? `, split ${data.tp} × ${data.pp} ways` : data.tp > 1 ? `, split ${data.tp} ways` : "";
      const sub = data.mode === "serve"
        ? (masked ? data.dtype : split ? `${fmt(data.weights_bytes, units)} in all${split}, ${data.dtype}` : `the whole model on one GPU, ${data.dtype}`)
        : data.layout.describe;
      node.append(chip(kind, "Weights per GPU", masked ? hidden : fmt(w.length ? w[0].bytes : 0, units), sub));
    } else if (kind === "capacity" && data.mode === "serve") {
      node.append(chip(kind, "Room for", masked ? hidden : `${count(data.max_concurrent_sequences)} conversations`,
        masked ? `of ${count(data.context)} tokens` : `of ${count(data.context)} tokens (${count(data.kv_capacity_tokens)} tokens of KV cache)`));
    } else if (kind === "kv" && data.mode === "serve") {
      const kv = data.per_gpu.items.find((i) => i.key === "kv_cache");
      node.append(chip(kind, "KV cache per GPU", masked ? hidden : fmt(kv ? kv.bytes : 0, units),
        masked ? "" : `${count(data.kv_bytes_per_token)} bytes per token × ${count(data.context)} tokens × ${count(data.users)} user${data.users > 1 ? "s" : ""}`));
    } else if (kind === "model_states" && data.mode === "train") {
      const r = now?.vs_reference?.model_states_bytes;
      node.append(chip(kind, "Model states per GPU", masked ? hidden : fmt(data.model_states_bytes, units),
        masked ? "" : `${data.recipe?.bytes_per_param ?? "?"} bytes × ${count(data.params_total)} parameters, ${data.layout.describe}${r && refLabel && at !== cmp?.reference && versus(r, refLabel) ? `; ${versus(r, refLabel)}` : ""}`));
    } else if (kind === "activations" && data.mode === "train") {
      const r = now?.vs_reference?.activations_bytes;
      node.append(chip(kind, "Activations per GPU", masked ? hidden : fmt(data.activations_bytes, units),
        masked ? "" : r && refLabel && at !== cmp?.reference && versus(r, refLabel) ? versus(r, refLabel) : `seq ${count(data.seq)} × micro-batch ${count(data.micro_batch)}${data.checkpointing && data.checkpointing !== "none" ? `, ${data.checkpointing} recompute` : ""}`));
    } else if (kind === "tokens" && data.mode === "train") {
      const r = now?.vs_reference?.tokens_per_second;
      node.append(chip(kind, "Tokens per second", masked ? hidden : count(data.tokens_per_second),
        masked ? "" : r && refLabel && at !== cmp?.reference && r.change_pct !== 0 ? `${pct(r)} vs ${refLabel}` : `at ${Math.round(data.mfu * 100)} % MFU, ${data.gpus} GPU${data.gpus > 1 ? "s" : ""}`));
    } else if (kind === "traffic" && data.mode === "train") {
      const r = now?.vs_reference?.comm_bytes_per_step;
      node.append(chip(kind, "Traffic per step per GPU", masked ? hidden : fmt(data.comm_bytes_per_step, units),
        masked ? "" : r && refLabel && at !== cmp?.reference && versus(r, refLabel) ? `${versus(r, refLabel)} ${fmt(cmp.points[cmp.reference]?.comm_bytes_per_step, units)}` : "data-parallel all-reduce / gathers"));
    } else if (kind === "zero_stages" && masked) {
      node.append(chip(kind, "Model states per GPU, by ZeRO stage", hidden, "", "wide"));
    } else if (kind === "zero_stages" && cmp) {
      const box = chip(kind, "Model states per GPU, by ZeRO stage", "", "", "wide");
      const list = document.createElement("span");
      list.className = "series";
      cmp.points.forEach((p, n) => {
        const s = document.createElement("span");
        s.className = `point${n === at ? " current" : ""}`;
        s.textContent = `${explore.labels[n]} ${p ? fmt(p.model_states_bytes, units) : "—"}`;
        list.append(s);
      });
      box.querySelector(".value").replaceWith(list);
      node.append(box);
    } else if (kind === "gpu_count") {
      // why not fewer: the engine's reason for each smaller count it tried (the last three)
      const refused = (data.search || []).filter((a) => !a.fits && !(data.lower_bound_gpus && a.gpus < data.lower_bound_gpus)).slice(-3);
      const bound = data.lower_bound_gpus;
      const value = `${count(data.gpus)} × ${data.gpu.name.replace(/^NVIDIA /, "")}`;
      const sub = [
        bound ? `lower bound ${count(bound)} (model states ÷ ${Math.round(data.headroom * 100)} % of ${fmt(data.gpu.memory_bytes, units, 0)})` : null,
        ...refused.map((a) => `not ${count(a.gpus)}: ${a.reason}`),
      ].filter(Boolean).join("; ");
      node.append(chip(kind, "Fewest GPUs", masked ? hidden : value, masked ? "" : sub, "wide"));
      if (cmp && explore && !masked) {
        const box = chip("gpu_count_series", explore.labels.every((l) => /^[A-Z]\d/.test(l)) ? "By GPU type" : explore.labels.every((l) => / %$/.test(l)) ? "By headroom line" : "Variants", "", "", "wide");
        const list = document.createElement("span");
        list.className = "series";
        cmp.points.forEach((p, n) => {
          const s = document.createElement("span");
          s.className = `point${n === at ? " current" : ""}`;
          s.textContent = p
            ? `${explore.labels[n]}: ${p.lower_bound_gpus ? `≥ ${count(p.lower_bound_gpus)} → ` : ""}${count(p.gpus)} GPUs`
            : `${explore.labels[n]}: ${cmp.errors?.[n] || "does not fit"}`;
          list.append(s);
        });
        box.querySelector(".value").replaceWith(list);
        node.append(box);
      }
    }
  }
}
