// The guided lesson: 23 steps as data (lesson.json); progress kept in the browser.
// A step sets the simulation to its scenario, shows only the controls it uses, and names the
// headline figures of its picture. Drills are checked by the server (POST /api/lesson/check):
// it reads the learner's units and compares with the engine's figure.
import { DEFAULTS, fromApi, normalise, plainError, post } from "./state.js";

const KEY = "gpuplan.lesson.v2";
const PHONE = "(max-width: 860px)";
const $ = (sel) => document.querySelector(sel);

export class Lesson {
  constructor({ setState, onStep, rerender }) {
    this.setState = setState;
    this.onStep = onStep;
    this.rerender = rerender;
    this.steps = [];
    this.progress = this.readProgress();
    this.id = null;
    this.revealed = false;
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
    $("#reveal-btn").addEventListener("click", () => { this.reveal(); this.rerender(); });
    $("#prediction").addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); this.reveal(); this.rerender(); }
    });
    $("#more-controls").addEventListener("click", () => {
      const form = $("#controls");
      const all = form.classList.toggle("show-all");
      $("#more-controls").setAttribute("aria-expanded", String(all));
      $("#more-controls").textContent = all ? "Only this step's controls" : "All controls";
    });
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
      b.addEventListener("click", () => { $("#lesson-toc").open = false; this.go(s.id); });
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
    $("#toc-summary").textContent = `All ${this.steps.length} steps`;
  }

  go(id) {
    if (id < 1 || id > this.steps.length) return;
    this.open(id, null);
    $("#step-title").focus?.({ preventScroll: true });
    this.land();
  }

  // On a phone, Next lands where the step starts: the picture (sticky at the top) with the
  // step's text and its control under it. On a desktop both are in view: nothing moves.
  land() {
    if (!window.matchMedia(PHONE).matches) return;
    const picture = document.querySelector(".server");
    // the verdict follows the picture; once scrolled there the picture sticks above it
    const verdict = $("#verdict").getBoundingClientRect().top + window.scrollY;
    window.scrollTo(0, Math.max(0, verdict - picture.offsetHeight - 6));
    const control = this.control();
    if (!control) return;
    const below = control.getBoundingClientRect().bottom - window.innerHeight + 8;
    const room = control.getBoundingClientRect().top - picture.getBoundingClientRect().bottom;
    if (below > 0) window.scrollBy(0, Math.min(below, Math.max(0, room)));
  }

  // The step's control: what the learner acts with (a highlighted control, the drill, or Show me).
  control() {
    const step = this.step();
    if (!step) return null;
    if (step.drill) return $("#drill");
    const used = document.querySelector("#controls .ctl.used");
    if (used) return used;
    return step.reveal ? $("#reveal-row") : null;
  }

  // Predict, act, reveal: the learner's first change of a control shows the step's numbers.
  acted() {
    const step = this.step();
    if (step && step.reveal && !this.revealed) this.reveal();
  }

  reveal() {
    const step = this.step();
    if (!step || !step.reveal) return;
    this.revealed = true;
    const guess = $("#prediction").value.trim();
    if (guess) {
      const p = document.createElement("p");
      p.className = "guess";
      p.textContent = `You predicted: ${guess}. The engine:`;
      $("#step-reveal").prepend(p);
    }
    $("#step-reveal").hidden = false;
    $("#reveal-row").hidden = true;
  }

  maskedWords() {
    const step = this.step();
    if (step.drill) return "Answer the drill first: the engine's numbers appear when you check your answer.";
    return step.controls.length
      ? "Make your prediction, then change the highlighted control: the engine's numbers appear."
      : "Make your prediction, then press Show me: the engine's numbers appear.";
  }

  step() {
    return this.steps.find((s) => s.id === this.id) || null;
  }

  // While a drill waits for its answer, the picture shows shapes but no numbers.
  masked() {
    const step = this.step();
    return Boolean(step && (step.drill || step.reveal) && !this.revealed);
  }

  scenario(step) {
    return normalise({ ...DEFAULTS, ...fromApi(step.scenario) });
  }

  open(id, stateFromUrl) {
    const step = this.steps.find((s) => s.id === id) || this.steps[0];
    this.id = step.id;
    this.revealed = false;
    this.progress.current = step.id;
    if (!this.progress.visited.includes(step.id)) this.progress.visited.push(step.id);
    this.save();
    $("#step-crumb").textContent = `Step ${step.id} of ${this.steps.length} · Part ${step.part}: ${step.part_title}`;
    const title = $("#step-title");
    title.textContent = step.title;
    title.tabIndex = -1;
    $("#step").dataset.kind = step.kind;
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
    const aside = $("#step-aside");
    aside.hidden = !step.aside;
    if (step.aside) {
      const [head, ...rest] = step.aside.split(": ");
      $("#step-aside-title").textContent = head;
      $("#step-aside-text").textContent = rest.join(": ");
    }
    $("#step-question").textContent = step.question || "";
    const reveal = $("#step-reveal");
    reveal.replaceChildren();
    for (const para of step.reveal || []) {
      const p = document.createElement("p");
      p.textContent = para;
      reveal.append(p);
    }
    reveal.hidden = true;
    $("#reveal-row").hidden = !step.reveal;
    $("#prediction").value = "";
    $("#reveal-how").textContent = step.controls.length ? "or change the highlighted control" : "";
    // only the controls this step uses, highlighted; the rest one click away
    const used = new Set(step.controls || []);
    for (const ctl of document.querySelectorAll("#controls .ctl")) {
      ctl.classList.toggle("used", used.has(ctl.dataset.control));
    }
    const form = $("#controls");
    form.classList.remove("show-all");
    form.classList.toggle("none-used", used.size === 0);
    $("#more-controls").setAttribute("aria-expanded", "false");
    $("#more-controls").textContent = used.size ? "All controls" : "Show the controls";
    const drill = $("#drill");
    drill.hidden = !step.drill;
    $("#drill-feedback").replaceChildren();
    $("#drill-feedback").className = "";
    if (step.drill) {
      $("#drill-label").textContent = `${step.drill.question} (${step.drill.unit})`;
      $("#drill-answer").value = "";
    }
    $("#step-prev").disabled = step.id === 1;
    $("#step-next").disabled = step.id === this.steps.length;
    this.markNav();
    this.setState(stateFromUrl ? { ...DEFAULTS, ...stateFromUrl } : this.scenario(step), { newStep: true });
    this.onStep(step.id);
  }

  async check() {
    const step = this.step();
    const out = $("#drill-feedback");
    const answer = $("#drill-answer").value;
    const reply = await post("/api/lesson/check", { step: step.id, answer });
    out.replaceChildren();
    if (!reply.ok) {
      out.className = "unavailable";
      out.textContent = `The engine could not check this: ${plainError(reply.data.detail)}`;
      return;
    }
    const r = reply.data;
    const line = (text, cls) => {
      const p = document.createElement("p");
      if (cls) p.className = cls;
      p.textContent = text;
      out.append(p);
      return p;
    };
    if (r.status === "unreadable") {
      out.className = "wrong";
      const said = r.message.charAt(0).toUpperCase() + r.message.slice(1);
      line(`${said}. Write a number, with its unit if the question has one (B, kB, MB, GB, TB, or GiB).`);
      return;
    }
    out.className = r.right ? "right" : "wrong";
    const within = `within ${Math.round(r.tolerance * 100)} % or as rounded`;
    line(r.right
      ? `Right: the engine says ${r.truth_text} (${within}).`
      : `Not quite: you said ${r.given_text}, the engine says ${r.truth_text}.`, "verdict-line");
    if (r.read_as) line(`Read as ${r.read_as}.`, "read-as");
    if (r.hint) line(r.hint, "hint");
    if (r.arithmetic?.length) {
      const ol = document.createElement("ol");
      ol.className = "arithmetic";
      for (const a of r.arithmetic) {
        const li = document.createElement("li");
        li.textContent = a;
        ol.append(li);
      }
      out.append(ol);
    }
    this.progress.drills[step.id] = r.right ? "right" : "wrong";
    this.save();
    this.markNav();
    this.revealed = true;
    this.rerender();
  }
}
