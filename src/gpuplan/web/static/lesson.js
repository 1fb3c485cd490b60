// The guided lesson: 23 steps as data (lesson.json); progress kept in the browser.
import { DEFAULTS, fmt, normalise, post, toRequest } from "./state.js";

const KEY = "gpuplan.lesson.v1";
const $ = (sel) => document.querySelector(sel);

// "per_gpu.items[category=weights].bytes" -> the value in the engine's answer
export function pick(data, path) {
  let node = data;
  for (const part of path.split(".")) {
    const m = part.match(/^([^[]+)(?:\[(\w+)=([^\]]+)\])?$/);
    if (!m || node === undefined || node === null) return undefined;
    node = node[m[1]];
    if (m[2]) {
      if (!Array.isArray(node)) return undefined;
      const found = node.filter((x) => String(x[m[2]]) === m[3]);
      if (!found.length) return undefined;
      node = found.length === 1 ? found[0] : { bytes: found.reduce((s, x) => s + x.bytes, 0) };
    }
  }
  return node;
}

export function engineAnswer(data, drill) {
  const paths = Array.isArray(drill.answer_from) ? drill.answer_from : [drill.answer_from];
  let sum = 0;
  for (const p of paths) {
    const v = pick(data, p);
    if (typeof v !== "number") return undefined;
    sum += v;
  }
  return sum * (drill.scale ?? 1);
}

export function parseAnswer(text) {
  const cleaned = String(text).trim().replace(/,/g, "").replace(/\s*(gb|tb|mb|gib|sequences|users)$/i, "");
  if (cleaned === "") return NaN;
  return Number(cleaned);
}

export class Lesson {
  constructor({ setState, getState, onStep }) {
    this.setState = setState;
    this.getState = getState;
    this.onStep = onStep;
    this.steps = [];
    this.progress = this.readProgress();
    this.id = null;
  }

  readProgress() {
    try {
      const p = JSON.parse(localStorage.getItem(KEY) || "{}");
      return { current: p.current || 1, visited: p.visited || [], drills: p.drills || {} };
    } catch {
      return { current: 1, visited: [], drills: {} };
    }
  }

  save() {
    try { localStorage.setItem(KEY, JSON.stringify(this.progress)); } catch { /* private mode */ }
  }

  current() {
    return this.progress.current;
  }

  async load() {
    const data = await fetch("/static/lesson.json").then((r) => r.json());
    this.steps = data.steps;
    this.renderNav();
    $("#step-prev").addEventListener("click", () => this.go(this.id - 1));
    $("#step-next").addEventListener("click", () => this.go(this.id + 1));
    $("#step-reset").addEventListener("click", () => this.open(this.id, null));
    $("#drill").addEventListener("submit", (e) => { e.preventDefault(); this.check(); });
  }

  renderNav() {
    const nav = $("#lesson-nav");
    nav.replaceChildren();
    let list = null;
    let part = null;
    for (const s of this.steps) {
      if (s.part !== part) {
        part = s.part;
        const h = document.createElement("h3");
        h.textContent = `${s.part}. ${s.part_title}`;
        list = document.createElement("ol");
        list.start = s.id;
        nav.append(h, list);
      }
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.dataset.step = s.id;
      b.textContent = s.title;
      b.addEventListener("click", () => this.go(s.id));
      li.append(b);
      list.append(li);
    }
    this.markNav();
  }

  markNav() {
    for (const b of document.querySelectorAll("#lesson-nav button")) {
      const id = Number(b.dataset.step);
      b.classList.toggle("visited", this.progress.visited.includes(id));
      b.classList.toggle("right", this.progress.drills[id] === "right");
      if (id === this.id) b.setAttribute("aria-current", "step");
      else b.removeAttribute("aria-current");
    }
    const n = this.progress.visited.length;
    $("#step-progress").textContent = `${n} of ${this.steps.length} steps visited · progress is kept in this browser`;
    $("#toc-summary").textContent = `All ${this.steps.length} steps (${n} visited)`;
  }

  go(id) {
    if (id < 1 || id > this.steps.length) return;
    this.open(id, null);
    $("#step-title").focus?.();
  }

  step() {
    return this.steps.find((s) => s.id === this.id);
  }

  scenario(step) {
    return normalise({ ...DEFAULTS, ...step.scenario });
  }

  open(id, stateFromUrl, initial = false) {
    const step = this.steps.find((s) => s.id === id) || this.steps[0];
    this.id = step.id;
    this.progress.current = step.id;
    if (!this.progress.visited.includes(step.id)) this.progress.visited.push(step.id);
    this.save();
    $("#step-crumb").textContent = `Part ${step.part} · ${step.part_title} · step ${step.id} of ${this.steps.length}`;
    const title = $("#step-title");
    title.textContent = step.title;
    title.tabIndex = -1;
    document.querySelector("#step").dataset.kind = step.kind;
    const text = $("#step-text");
    text.replaceChildren();
    for (const para of step.text) {
      const p = document.createElement("p");
      p.textContent = para;
      text.append(p);
    }
    if (step.link) {
      const a = document.createElement("a");
      a.href = step.link;
      a.textContent = step.link.includes("cheat") ? "Open the cheat sheet" : "Open the playground";
      const p = document.createElement("p");
      p.append(a);
      text.append(p);
    }
    $("#step-question").textContent = step.question || "";
    const drill = $("#drill");
    drill.hidden = !step.drill;
    $("#drill-feedback").textContent = "";
    $("#drill-feedback").className = "";
    if (step.drill) {
      $("#drill-label").textContent = step.drill.question;
      $("#drill-unit").textContent = step.drill.unit || "";
      $("#drill-answer").value = "";
    }
    $("#step-prev").disabled = step.id === 1;
    $("#step-next").disabled = step.id === this.steps.length;
    this.markNav();
    this.setState(stateFromUrl ? { ...DEFAULTS, ...stateFromUrl } : this.scenario(step));
    this.onStep(step.id);
  }

  async check() {
    const step = this.step();
    const drill = step.drill;
    const out = $("#drill-feedback");
    const given = parseAnswer($("#drill-answer").value);
    if (!Number.isFinite(given)) {
      out.className = "wrong";
      out.textContent = "Enter a number, e.g. 17.2";
      return;
    }
    // the answer is the engine's, for the step's own scenario (not whatever the controls show now)
    let request;
    try {
      request = toRequest(this.scenario(step));
    } catch (err) {
      out.textContent = err.message;
      return;
    }
    const answer = await post(request.path, { ...request.body, fixes: request.path === "/api/serve" ? false : undefined });
    if (!answer.ok) {
      out.className = "unavailable";
      out.textContent = answer.status === 501
        ? "This drill needs the training engine, which is not yet available in this version."
        : `The engine could not answer: ${answer.data.detail}`;
      return;
    }
    const truth = engineAnswer(answer.data, drill);
    if (truth === undefined) {
      out.className = "unavailable";
      out.textContent = "The engine's answer does not include this figure.";
      return;
    }
    const tol = drill.tolerance ?? 0.05;
    const right = Math.abs(given - truth) <= tol * Math.abs(truth);
    const shown = `${truth.toLocaleString("en-US", { maximumFractionDigits: truth >= 100 ? 0 : 2 })} ${drill.unit || ""}`.trim();
    out.className = right ? "right" : "wrong";
    out.textContent = right
      ? `Right: the engine says ${shown} (within ${Math.round(tol * 100)} %). ${drill.explanation}`
      : `Not quite: you said ${given}, the engine says ${shown}. ${drill.explanation}`;
    this.progress.drills[step.id] = right ? "right" : "wrong";
    this.save();
    this.markNav();
  }
}

export { fmt };
