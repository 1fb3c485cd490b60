"""The web app in a real Chromium (Debian's /usr/bin/chromium, driven by Playwright).

One browser for the module and two shared pages (1280×800, and 390×844 with reduced motion), so
the whole file runs in about 75 s on the 2-core development machine. Every wait is for a
condition, bounded only against a hang (HANG_MS); timing is measured and printed, never asserted
(bench/web_latency.py holds the 100 ms target). Screenshots of every lesson step at both sizes go to
test-artifacts/lesson/ (git-ignored). Skipped, with the reason, where Chromium or Playwright is
missing. Expected figures come from the engine's API (what the page must show) and, where the
lesson states a rule, from that rule.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("GPUPLAN_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# Only a guard against hangs, never a timing test: the CI machine (2 cores) may be loaded, so
# every wait is for a condition, bounded by this. Timing is bench/web_latency.py's job.
HANG_MS = 120_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"{CHROMIUM} is missing: apt-get install -y chromium (CI installs it)",
    ),
]
playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install playwright"
)
uvicorn = pytest.importorskip("uvicorn")

import importlib.util  # noqa: E402

import gpuplan  # noqa: E402
from gpuplan.web.app import create_app  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "make_lesson", Path(__file__).resolve().parent.parent / "tools/make_lesson.py"
)
assert _spec and _spec.loader
make_lesson = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_lesson)

LESSON = json.loads(
    (Path(__file__).resolve().parent.parent / "src/gpuplan/web/static/lesson.json").read_text()
)
STEPS = LESSON["steps"]
LESSON_MEMORY = "marketed"
README_SHOTS = {
    "desktop": 13,
    "phone": 3,
}  # copied to docs/ for the README  # the lesson counts an H100 at its marketed 80 GB


def gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(
        # the engine's deadline raised from 10 s: a loaded machine must not turn into a 503
        uvicorn.Config(
            create_app(deadline_s=HANG_MS / 1000),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_MS / 1000
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Shared:
    """A page kept for the whole module, with what it requested and every script error."""

    def __init__(self, browser: Any, base: str, **options: Any) -> None:
        # bypass_csp only so the tests may evaluate expressions; test_page_loads_* keeps the CSP
        self.context = browser.new_context(bypass_csp=True, **options)
        self.context.set_default_timeout(HANG_MS)
        self.pg = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.posts: list[tuple[str, Any]] = []  # (path, body) of each engine request
        self.pg.on("pageerror", lambda e: self.errors.append(str(e)))
        self.pg.on("console", self._console)
        self.pg.on("request", self._request)

    def _request(self, r: Any) -> None:
        self.requests.append(r.url)
        if r.method == "POST":
            self.posts.append((r.url.split(self.base, 1)[-1], json.loads(r.post_data or "null")))

    def _console(self, message: Any) -> None:
        # an API refusal (4xx) is a state the page shows; any other console error is a bug
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.errors.append(message.text)


@pytest.fixture(scope="module")
def shared_desktop(browser: Any, base_url: str) -> Iterator[Shared]:
    s = Shared(browser, base_url, viewport=DESKTOP)
    yield s
    s.context.close()


@pytest.fixture(scope="module")
def shared_phone(browser: Any, base_url: str) -> Iterator[Shared]:
    s = Shared(browser, base_url, viewport=PHONE, reduced_motion="reduce")
    yield s
    s.context.close()


@pytest.fixture
def page(shared_desktop: Shared) -> Iterator[Any]:
    shared_desktop.errors.clear()
    pg = shared_desktop.pg
    pg.base = shared_desktop.base
    yield pg
    assert not shared_desktop.errors, shared_desktop.errors


@pytest.fixture
def phone(shared_phone: Shared) -> Iterator[Any]:
    shared_phone.errors.clear()
    pg = shared_phone.pg
    pg.base = shared_phone.base
    yield pg
    assert not shared_phone.errors, shared_phone.errors


def shot(pg: Any, name: str, full: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full, animations="disabled")


def rendered(pg: Any) -> int:
    return int(pg.get_attribute("body", "data-rendered") or 0)


def wait_render(pg: Any, after: int) -> None:
    pg.wait_for_function(
        f"Number(document.body.dataset.rendered || 0) > {after} && !document.body.dataset.busy",
        timeout=HANG_MS,
    )


def open_page(pg: Any, path: str) -> None:
    """A fresh load of the page at `path` (not a same-document hash change)."""
    pg.goto("about:blank")
    pg.goto(pg.base + "/" + path)
    pg.wait_for_selector("body[data-rendered]", timeout=HANG_MS)
    pg.wait_for_function("!document.body.dataset.busy", timeout=HANG_MS)


def to_step(pg: Any, n: int) -> None:
    """Go to lesson step n the way a learner's link does, and wait for its picture."""
    if not pg.url.startswith(pg.base):
        open_page(pg, f"#/lesson/{n}")
        return
    before = rendered(pg)
    if pg.evaluate("location.hash") == f"#/lesson/{n}":
        pg.reload()
        pg.wait_for_selector("body[data-rendered]", timeout=HANG_MS)
        pg.wait_for_function("!document.body.dataset.busy", timeout=HANG_MS)
    else:
        pg.evaluate(f"location.hash = '#/lesson/{n}'")
        wait_render(pg, before)
    title = STEPS[n - 1]["title"]
    pg.wait_for_function(
        f"document.querySelector('#step-title').textContent === {json.dumps(title)}"
    )


def change(pg: Any, action: str, selector: str, value: str) -> None:
    before = rendered(pg)
    if action == "select":
        pg.select_option(selector, value)
    else:
        pg.fill(selector, value)
    wait_render(pg, before)


def reveal(pg: Any) -> None:
    """Show me: the step's numbers, as after the learner's action (a no-op once shown)."""
    if pg.locator("#reveal-btn").is_visible():
        pg.evaluate("document.querySelector('#reveal-btn').click()")
        pg.wait_for_function("document.body.dataset.masked !== '1' && !document.body.dataset.busy")


def page_text(pg: Any) -> str:
    return str(pg.evaluate("document.body.innerText"))


def serve(**kw: Any) -> Any:
    kw.setdefault("gpu_memory", LESSON_MEMORY)
    return gpuplan.serve(**kw)


def train(**kw: Any) -> Any:
    kw.setdefault("gpu_memory", LESSON_MEMORY)
    return gpuplan.train(**kw)


def headline(pg: Any, kind: str) -> str:
    return str(pg.inner_text(f"#headline [data-headline='{kind}']"))


# --- loading, offline -------------------------------------------------------------------------


def _load_clean(browser: Any, base_url: str, name: str, size: dict[str, int]) -> None:
    context = browser.new_context(viewport=size)
    context.set_default_timeout(HANG_MS)
    pg = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    pg.on("request", lambda r: requests.append(r.url))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(base_url + "/#/playground")
    pg.wait_for_selector("body[data-rendered]")
    pg.wait_for_selector("#gpus rect.block")
    assert "Fits" in pg.inner_text("#verdict")
    outside = [u for u in requests if not u.startswith(base_url) and not u.startswith("data:")]
    assert not outside, outside
    assert not errors, errors
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"] + 1, f"horizontal scroll at {size}: {width}"
    shot(pg, f"playground-{name}")
    context.close()


def test_page_loads_with_no_external_requests(browser: Any, base_url: str) -> None:
    """With the real Content-Security-Policy: at 1280×800 and at phone width."""
    _load_clean(browser, base_url, "desktop", DESKTOP)
    _load_clean(browser, base_url, "phone", PHONE)


# --- every step, both sizes -------------------------------------------------------------------

IN_VIEW = """() => {
  const box = (s) => { const r = document.querySelector(s).getBoundingClientRect(); return [r.top, r.bottom, r.height]; };
  return {title: box('#step-title'), text: box('#step-text'), question: box('#step-question'),
          picture: box('#gpus'), scrollY: window.scrollY, vh: window.innerHeight};
}"""

SMALL_TEXT = """() => {
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const t = walker.currentNode;
    if (!t.textContent.trim()) continue;
    const el = t.parentElement;
    if (!el) continue;
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden') continue;
    let size = parseFloat(cs.fontSize);
    const svg = el.closest('svg');
    if (svg && svg.viewBox.baseVal && svg.viewBox.baseVal.width) {
      size *= svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    }
    if (size < 10.99) bad.push([el.tagName, String(el.className.baseVal ?? el.className), t.textContent.trim().slice(0, 30), size]);
  }
  return bad;
}"""

CONTROLS = """() => [...document.querySelectorAll('#controls .ctl')]
  .filter(c => c.getBoundingClientRect().height > 0).map(c => c.dataset.control)"""


CONTROL_BOX = """() => {
  const step = document.querySelector('#step-title');
  const pick = document.querySelector('#drill:not([hidden])') || document.querySelector('#controls .ctl.used')
    || document.querySelector('#reveal-row:not([hidden])');
  const r = (e) => { const b = e.getBoundingClientRect(); return [b.top, b.bottom, b.height]; };
  return {picture: r(document.querySelector('#gpus')), control: pick ? r(pick) : null,
          scrollY: window.scrollY, vh: window.innerHeight};
}"""

# the page's labels: no two overlap (a block label never under the HBM or headroom line either)
OVERLAPS = """(sel) => {
  const boxes = [...document.querySelectorAll(sel + ' text')].filter(t => t.getBBox().width > 0)
    .map(t => [t.textContent, t.getBoundingClientRect()]);
  const bad = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, p] = boxes[i], [b, q] = boxes[j];
    if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom - 0.5 && q.top < p.bottom - 0.5) bad.push([a, b]);
  }
  for (const line of document.querySelectorAll(sel + ' line.hbm-line, ' + sel + ' line.headroom-line')) {
    const y = line.getBoundingClientRect().top + line.getBoundingClientRect().height / 2;
    for (const t of document.querySelectorAll(sel + ' text.block-label, ' + sel + ' text.overflow-label')) {
      const r = t.getBoundingClientRect();
      if (r.top + 1 < y && y < r.bottom - 1) bad.push([t.textContent, line.getAttribute('class')]);
    }
  }
  return bad;
}"""


def intersects(box: list[float], vh: float) -> bool:
    top, bottom, height = box
    return height > 0 and bottom > 0 and top < vh


def _taught_hidden_then_shown(pg: Any, step: dict[str, Any]) -> None:
    """Predict → act → reveal: none of the step's taught figures is in the page's text before
    the reveal; after it (Show me; a drill's answer is the drill test's) each one is."""
    text = page_text(pg)
    early = [f for f in step["taught"] if f in text]
    assert not early, (step["id"], early)
    if step.get("reveal"):
        reveal(pg)
        text = page_text(pg)
        missing = [f for f in step["taught"] if f not in text]
        assert not missing, (step["id"], missing)


def _drill_leaks_nothing(pg: Any, step: dict[str, Any]) -> None:
    """No placeholder, label or unreadable-answer message holds an answer the drill accepts."""
    path, body = make_lesson.page_request(step["scenario"])
    data = pg.evaluate(
        "([p, b]) => fetch(p, {method: 'POST', headers: {'content-type': 'application/json'}, body: JSON.stringify(b)}).then(r => r.json())",
        [path, body],
    )
    drill = step["drill"]
    truth = data[drill["answer_from"]] / {"GB": 1e9, "TB": 1e12}.get(drill["unit"], 1)
    accepted = set(step["taught"])
    for digits in (2, 3, 4):  # what the check accepts: the figure as rounded, or within 1-2 %
        accepted |= {f"{float(f'{truth:.{digits}g}'):g}", f"{float(f'{truth:.{digits}g}'):,g}"}
    said = [
        str(pg.get_attribute("#drill-answer", "placeholder")),
        pg.inner_text("#drill-label"),
        pg.inner_text("#step"),
    ]
    submit(pg, "lots")
    said.append(pg.inner_text("#drill-feedback"))
    for text in said:
        numbers = set(re.findall(r"\d[\d,]*(?:\.\d+)?", text))
        assert not numbers & accepted, (step["id"], text, numbers & accepted)


def _walk(pg: Any, shared: Shared, name: str, size: dict[str, int]) -> None:
    """Every step reached by Next, as a learner does: where it lands, what it hides before the
    reveal, the request it sends (make_lesson's), a screenshot after the reveal."""
    open_page(pg, "#/lesson/1")
    pg.evaluate("window.scrollTo(0, 0)")
    (ARTIFACTS / "lesson").mkdir(parents=True, exist_ok=True)
    phone = size["width"] < 860
    for step in STEPS:
        n = step["id"]
        if n > 1:
            shared.posts.clear()
            before = rendered(pg)
            if phone:  # the learner scrolls down to Next and taps it
                pg.click("#step-next")
            else:  # a click where the button is, without the test scrolling the page
                pg.evaluate("document.querySelector('#step-next').click()")
            wait_render(pg, before)
            pg.wait_for_function(
                f"document.querySelector('#step-title').textContent === {json.dumps(step['title'])}"
            )
            posted = [b for path, b in shared.posts if path == f"/api/{step['scenario']['mode']}"]
            assert posted and posted[0] == make_lesson.page_request(step["scenario"])[1], (
                n,
                posted[:1],
            )
        box = pg.evaluate(CONTROL_BOX)
        if phone:  # where Next lands, before the learner acts
            pg.screenshot(path=str(ARTIFACTS / "lesson" / f"step-{n:02d}-phone-landed.png"))
        assert intersects(box["picture"], box["vh"]), (n, box)
        if box["control"]:
            assert intersects(box["control"], box["vh"]), (n, box)
        if not phone:
            assert box["scrollY"] == 0, (n, box)  # on a desktop nothing jumps
            inview = pg.evaluate(IN_VIEW)
            for part in ("title", "text", "question", "picture"):
                top, bottom, height = inview[part]
                assert height > 0 and top >= 0 and bottom <= inview["vh"], (n, part, inview)
            shown = pg.evaluate(CONTROLS)
            assert set(shown) == set(step["controls"]), (n, shown, step["controls"])
        else:
            small = pg.evaluate(SMALL_TEXT)
            assert not small, (n, small[:5])
            assert pg.evaluate("document.documentElement.scrollWidth") <= size["width"] + 1, n
        if step.get("drill"):
            _drill_leaks_nothing(pg, step)
        _taught_hidden_then_shown(pg, step)
        assert not pg.evaluate(OVERLAPS, "#gpus"), (n, pg.evaluate(OVERLAPS, "#gpus"))
        assert " × vs " not in pg.inner_text("#headline"), (n, pg.inner_text("#headline"))
        if n == 5:  # the drill of step 9 asks for the 128k cache: step 5 never states it
            assert "17.18" not in page_text(pg) and "17.2 " not in page_text(pg)
        # animations="disabled": the blocks drawn where they settle, not mid-transition
        pg.screenshot(
            path=str(ARTIFACTS / "lesson" / f"step-{n:02d}-{name}.png"), animations="disabled"
        )
        if n == README_SHOTS[name]:  # the README's pictures (docs/lesson-*.jpg)
            pg.screenshot(
                path=str(ARTIFACTS / f"lesson-{name}.jpg"),
                type="jpeg",
                quality=60,
                animations="disabled",
            )
        if not phone:
            pg.evaluate("window.scrollTo(0, 0)")
    outside = [u for u in shared.requests if not u.startswith(pg.base)]
    assert not outside, outside


def test_every_step_at_1280x800(page: Any, shared_desktop: Shared) -> None:
    """Each step by Next: picture, text and control in view without scrolling (nothing jumps);
    only the step's controls; its taught figures absent until the reveal; the page's request is
    make_lesson's; drills leak no answer; labels never overlap; a screenshot each."""
    _walk(page, shared_desktop, "desktop", DESKTOP)
    # the rest of the controls are one click away
    to_step(page, 13)
    page.click("#more-controls")
    assert len(page.evaluate(CONTROLS)) > 10
    page.click("#more-controls")
    assert page.evaluate(CONTROLS) == ["zero"]


def test_every_step_on_a_phone(phone: Any, shared_phone: Shared) -> None:
    """390×844, each step by Next: the picture and the step's control on screen together, no
    text under 11 px, no sideways scroll, the same reveal as on a desktop; a screenshot each."""
    _walk(phone, shared_phone, "phone", PHONE)


def test_blocks_animate_unless_reduced_motion(page: Any, phone: Any) -> None:
    open_page(page, "#/lesson/13")
    moving = page.evaluate(
        "getComputedStyle(document.querySelector('#gpus rect.block')).transitionDuration"
    )
    assert moving.split(",")[0].strip() not in ("0s", ""), moving
    to_step(phone, 13)
    still = phone.evaluate(
        "getComputedStyle(document.querySelector('#gpus rect.block')).transitionDuration"
    )
    assert {d.strip() for d in still.split(",")} == {"0s"}, still


# --- headline numbers -------------------------------------------------------------------------


def test_headline_numbers_are_the_engines(page: Any) -> None:
    n8 = train(model="llama-3.1-8b", gpus=1).params_total
    to_step(page, 1)  # "8.03 B × 2 = 16 GB of weights ... the plan comes to 19 GB of 80"
    assert headline(page, "weights").split("\n")[1] == "?"  # predict first
    page.fill("#prediction", "about 20 GB")
    page.press("#prediction", "Enter")  # the learner's guess, then the engine's figures
    page.wait_for_function("document.body.dataset.masked !== '1'")
    assert "You predicted: about 20 GB" in page.inner_text("#step-reveal")
    first = serve(model="llama-3.1-8b", gpus=1)
    assert first.weights_bytes == 2 * n8 and gb(2 * n8) in headline(page, "weights")
    assert round(first.per_gpu_total_bytes / 1e9) == 19
    assert f"{gb(first.per_gpu_total_bytes)}" in headline(page, "total")
    assert "of 80 GB" in headline(page, "total")

    to_step(page, 5)  # 2 × 32 layers × 8 KV heads × 128 × 2 bytes per token, × the context
    per_token = 2 * 32 * 8 * 128 * 2
    reveal(page)
    assert f"{per_token:,} bytes per token" in headline(page, "kv")
    assert gb(per_token * 4096) in headline(page, "kv")
    change(page, "fill", "#c-context", "32768")
    assert gb(per_token * 32768) in headline(page, "kv")

    to_step(page, 10)
    reveal(page)
    # 16 bytes per parameter: 2 weights + 2 gradients + 12 optimizer
    assert gb(16 * n8) in headline(page, "model_states")

    to_step(page, 13)  # ZeRO on 8 GPUs: 16N, 4N + 12N/8, 2N + 14N/8, 16N/8
    reveal(page)
    text = headline(page, "zero_stages")
    for stage, expected in enumerate((16 * n8, 4 * n8 + 12 * n8 / 8, 2 * n8 + 14 * n8 / 8, 2 * n8)):
        assert f"ZeRO-{stage} {gb(expected)}" in text, (stage, text)

    to_step(page, 14)  # ZeRO-3 moves 1.5 × the traffic of plain data parallelism
    reveal(page)
    plan = train(model="llama-3.1-8b", gpus=8, zero=3)
    text = headline(page, "traffic")
    assert gb(plan.comm_bytes_per_step) in text and "1.5 ×" in text, text

    to_step(page, 17)  # full recompute: a third more compute, 25 % fewer tokens per second
    change(page, "select", "#c-ckpt", "full")
    text = headline(page, "tokens")
    plan = train(model="llama-3.1-8b", gpus=8, zero=3, seq=16384, checkpointing="full")
    kept = train(model="llama-3.1-8b", gpus=8, zero=3, seq=16384, checkpointing="none")
    slower = 100 * (1 - plan.tokens_per_second / kept.tokens_per_second)  # the engine's, ~25 %
    shown = (f"−{slower:.1f} %", f"−{slower:.0f} %")
    assert f"{plan.tokens_per_second:,.0f}" in text and any(s in text for s in shown), text
    assert gb(plan.activations_bytes) in headline(page, "activations")

    to_step(page, 18)  # lower bound vs chosen, and why
    reveal(page)
    # checkpointing is the planner's choice on the page as in the lesson's text
    plan = train(model="llama-3.1-70b", gpus="auto", zero=3)
    states = train(model="llama-3.1-70b", gpus=1, zero=0).model_states_bytes
    bound = math.ceil(states / (0.9 * 80e9))
    assert plan.lower_bound_gpus == bound == 16
    text = headline(page, "gpu_count")
    assert f"{plan.gpus} × H100" in text and f"lower bound {bound}" in text, text
    assert plan.why_this_many()[-1].split(": ", 1)[1] in text
    # the text and the chip agree: the 16-GPU attempt's figure in the words is the chip's
    words = page.inner_text("#step-reveal")
    at16 = re.search(r"best layout needs ([\d.,]+ GB)", words)
    assert at16 and f"not 16: best layout needs {at16.group(1)}" in text, (words, text)
    shot(page, "headline-step-18", full=False)


def test_scale_is_fixed_across_zero_stages_and_the_change_is_said(page: Any) -> None:
    to_step(page, 13)
    lines = []
    for stage in ("0", "1", "2", "3"):
        if stage != "0":
            change(page, "select", "#c-zero", stage)
            caption = page.inner_text("#change-caption")
            assert f"ZeRO stage {int(stage) - 1} → {stage}" in caption, caption
            if stage == "1":
                assert "Optimizer states ÷ 8" in caption, caption
        lines.append(page.get_attribute("#gpus line.hbm-line", "y1"))
    assert len(set(lines)) == 1, lines


# --- GPU choice, memory convention ----------------------------------------------------------


def test_steps_18_and_20_follow_the_gpu_type(page: Any) -> None:
    to_step(page, 18)
    for gpu, name, count in (("h200", "H200", 16), ("b200", "B200", 8)):
        change(page, "select", "#c-gpu", gpu)
        plan = train(model="llama-3.1-70b", gpu=gpu, gpus="auto", zero=3)
        assert plan.gpus == count
        assert f"{count} × {plan.bill.setup.gpu.name}" in page.inner_text("#verdict")
        assert f"{count} × {name}" in headline(page, "gpu_count")
    to_step(page, 20)
    reveal(page)
    assert "Out of memory" in page.inner_text("#verdict")
    for gpu in ("h200", "b200"):
        change(page, "select", "#c-gpu", gpu)
        plan = serve(model="llama-3.1-405b", gpu=gpu, gpus=8, context=8192)
        assert plan.fits
        memory = plan.bill.setup.gpu.marketed_bytes
        verdict = page.inner_text("#verdict")
        assert verdict.startswith("Fits") and f"of {gb(memory)}" in verdict, verdict
        assert page.text_content("#total-bytes") == gb(plan.per_gpu_total_bytes)
        shot(page, f"step-20-{gpu}", full=False)
    # a typed memory stays when the GPU type changes
    page.click("#more-controls")
    change(page, "select", "#c-membasis", "custom")
    change(page, "fill", "#c-gpumem", "100GB")
    change(page, "select", "#c-gpu", "h100-sxm")
    verdict = page.inner_text("#verdict")
    assert "100.00 GB" in verdict and "H100" in verdict, verdict


def test_memory_convention_explained_once(page: Any) -> None:
    to_step(page, 1)
    h100 = gpuplan.api.common.get_gpu("h100")
    page.click("#step-aside summary")
    text = page.inner_text("#step-aside")
    assert gb(h100.driver_total_bytes) in text and "80 GB" in text and "MiB" in text
    asides = [s["id"] for s in STEPS if s.get("aside")]
    assert asides == [1]
    assert page.input_value("#c-membasis") == "marketed"
    open_page(page, "#/playground")
    assert page.input_value("#c-membasis") == "driver"
    assert gb(h100.driver_total_bytes) in page.inner_text("#c-membasis")


# --- drills ---------------------------------------------------------------------------------


def submit(pg: Any, answer: str) -> str:
    pg.fill("#drill-answer", answer)
    pg.evaluate("document.querySelector('#drill-feedback').replaceChildren()")
    pg.click("#drill button[type=submit]")
    pg.wait_for_function("document.querySelector('#drill-feedback').innerText.length > 0")
    return str(pg.get_attribute("#drill-feedback", "class"))


def test_drills_hide_the_answer_and_read_units(page: Any) -> None:
    to_step(page, 21)
    states = train(model="llama-3.1-70b", gpus=1, zero=0).model_states_bytes
    hidden = page.inner_text("body")
    for figure in (f"{states / 1e12:.2f} TB", f"{states / 1e9:,.2f}", "1,128"):
        assert figure not in hidden, figure
    assert not page.locator("#details").is_visible()
    for answer in ("1129 GB", "1,120 GB", "1.13 TB", "1,13 TB"):
        assert submit(page, answer) == "right", (answer, page.inner_text("#drill-feedback"))
    feedback = page.inner_text("#drill-feedback")
    assert "70.55 B × 2 bytes" in feedback and "1.13 TB" in feedback  # the arithmetic
    assert page.locator("#details").is_visible()  # revealed once answered
    assert submit(page, "16,3") == "wrong"
    assert submit(page, "1120") == "wrong"
    assert "1120 GB would be right" in page.inner_text("#drill-feedback")
    assert submit(page, "lots") == "wrong"
    assert "cannot read" in page.inner_text("#drill-feedback").lower()
    shot(page, "drill-feedback", full=False)

    to_step(page, 9)
    kv = serve(model="llama-3.1-8b", gpus=1, context=131072).to_dict()["kv_bytes_per_sequence"]
    assert f"{kv / 1e9:.2f}" not in page.inner_text("body")
    assert submit(page, "5") == "wrong"
    assert f"{kv / 1e9:.2f} GB" in page.inner_text("#drill-feedback")
    assert submit(page, "17,2") == "right"  # a decimal comma
    page.reload()
    page.wait_for_selector("body[data-rendered]")
    assert "right" in (page.get_attribute("#lesson-nav button[data-step='9']", "class") or "")


# --- fixes --------------------------------------------------------------------------------------


def test_three_answers_for_serving_and_fixes_for_training(page: Any) -> None:
    to_step(page, 20)
    reveal(page)
    page.wait_for_selector("#fixes button")
    answers = page.eval_on_selector_all("#fixes button", "bs => bs.map(b => b.dataset.answer)")
    assert answers[:3] == ["fewer_bytes", "bigger_gpu", "more_gpus"], answers
    labels = page.eval_on_selector_all("#fixes button", "bs => bs.map(b => b.innerText)")
    assert len(set(labels)) == len(labels)
    before = rendered(page)
    page.click("#fixes button[data-answer='bigger_gpu']")
    wait_render(page, before)
    assert page.inner_text("#verdict").startswith("Fits")
    assert page.input_value("#c-gpu") == "h200"

    to_step(page, 13)  # 8 GPUs, ZeRO-0: does not fit
    reveal(page)
    page.wait_for_selector("#fixes button")
    answers = page.eval_on_selector_all("#fixes button", "bs => bs.map(b => b.dataset.answer)")
    assert {"shard_states", "recompute", "lora"} <= set(answers), answers
    assert {"more_gpus", "relayout"} & set(answers), answers
    before = rendered(page)
    page.click("#fixes button[data-answer='shard_states']")
    wait_render(page, before)
    assert page.inner_text("#verdict").startswith("Fits")
    assert page.input_value("#c-zero") in ("1", "2", "3")


def test_break_a_plan_outline_not_tint(page: Any) -> None:
    open_page(page, "#/playground?gpu_memory=marketed&gpus=1")
    change(page, "fill", "#c-model", "llama-3.1-70b")
    page.wait_for_selector("#oom-marker")
    plan = serve(model="llama-3.1-70b", gpus=1)
    assert f"OOM: +{gb(plan.per_gpu_total_bytes - 80_000_000_000)}" in page.text_content(
        "#oom-marker"
    )
    # the weights keep their colour where they cross HBM: the overflow is outlined, not tinted
    band_fill = page.evaluate("getComputedStyle(document.querySelector('.overflow-band')).fill")
    assert band_fill == "none", band_fill
    weights = page.evaluate(
        "getComputedStyle(document.querySelector('#gpus rect.block.cat-weights')).fill"
    )
    assert weights == "rgb(59, 111, 209)", weights
    shot(page, "oom")
    before = rendered(page)
    page.click("#fixes button.cheapest")
    wait_render(page, before)
    assert page.locator("#oom-marker").count() == 0
    assert "Fits" in page.inner_text("#verdict")


def test_error_state_is_clear(page: Any) -> None:
    open_page(page, "#/playground?model=llama-3.1-70b&gpus=3")
    page.wait_for_selector(".verdict.error")
    text = page.inner_text("#verdict")
    assert "Cannot size this" in text and "--" not in text, text
    assert "Reset step" not in text, text  # the playground has no such button
    assert page.locator(".error-ways button").count() >= 1  # a way out, one click
    change(page, "fill", "#c-gpus", "4")
    assert "stale" not in (page.get_attribute("#gpus", "class") or "")


def test_context_is_bounded_by_the_model(page: Any) -> None:
    open_page(page, "#/playground?gpu_memory=marketed&gpus=1")
    max_context = gpuplan.load_architecture("llama-3.1-8b").max_position_embeddings
    assert page.get_attribute("#c-context-range", "max") == str(math.log2(max_context)).rstrip(
        "0"
    ).rstrip(".")
    assert page.locator("#context-note").is_hidden()
    change(page, "fill", "#c-context", str(2 * max_context))
    note = page.inner_text("#context-note")
    assert f"{max_context:,}" in note, note


def test_one_selected_tab(page: Any) -> None:
    open_page(page, "#/lesson/1")
    for tab in ("playground", "plots", "cheatsheet", "lesson"):
        page.click(f"header nav a[data-tab='{tab}']")
        page.wait_for_function(f"document.body.dataset.tab === '{tab}'")
        selected = page.eval_on_selector_all(
            "header nav a",
            "as => as.filter(a => getComputedStyle(a).backgroundColor !== 'rgba(0, 0, 0, 0)').map(a => a.dataset.tab)",
        )
        assert selected == [tab], selected
        assert page.locator("header nav [aria-current]").count() == 1


TIMELINE = """() => [...document.querySelectorAll('#timeline li.phase')].map(li => ({
  name: li.dataset.phase, label: li.querySelector('.phase-name').innerText,
  total: li.querySelector('.phase-total').innerText, peak: li.classList.contains('peak'),
  tag: li.querySelector('.phase-peak').innerText,
  parts: [...li.querySelectorAll('.phase-bar i')].map(i => [i.className.slice(4), i.getBoundingClientRect().width]),
}))"""


def _timeline_is(pg: Any, data: dict[str, Any]) -> None:
    """The drawn timeline is the API answer's: its phases in order, each labelled and totalled
    as the engine gives it, the engine's peak phase marked, each bar its bytes by category on
    one scale; the note under it the answer's memory_figures."""
    rows = pg.evaluate(TIMELINE)
    phases = data["phases"]
    assert [r["name"] for r in rows] == [p["name"] for p in phases]
    assert [r["label"] for r in rows] == [p["label"] for p in phases]
    assert [r["total"] for r in rows] == [gb(p["total_bytes"]) for p in phases]
    assert [r["peak"] for r in rows] == [p["name"] == data["peak_phase"] for p in phases]
    assert [r["tag"] for r in rows].count("peak") == 1
    per_byte = []
    for row, phase in zip(rows, phases, strict=True):
        drawn = {category: width for category, width in row["parts"]}
        assert set(drawn) == {c for c, b in phase["bytes_by_category"].items() if b > 0}, row
        per_byte += [w / phase["bytes_by_category"][c] for c, w in drawn.items() if w > 20]
    assert max(per_byte) / min(per_byte) < 1.1, per_byte  # one scale for every bar
    peak = next(p for p in phases if p["name"] == data["peak_phase"])
    note = pg.inner_text("#timeline-peak")
    figures = data["memory_figures"]
    assert peak["label"] in note, note
    assert gb(figures["allocated_bytes"]) in note and gb(figures["nvidia_smi_bytes"]) in note


def test_training_timeline_is_the_engines_phases(page: Any) -> None:
    """Steps 12 and 17: the step's phases drawn from the real API answer (`phases`,
    `peak_phase`, `memory_figures`), with and without activation recompute."""
    to_step(page, 12)  # the late OOM: the activations peak before the backward frees them
    reveal(page)
    _timeline_is(
        page, train(model="llama-3.1-8b", gpus=8, zero=0, seq=8192, micro_batch=4).to_dict()
    )
    to_step(page, 17)
    reveal(page)
    for checkpointing in ("none", "full"):
        if checkpointing == "full":
            change(page, "select", "#c-ckpt", "full")
        data = train(
            model="llama-3.1-8b", gpus=8, zero=3, seq=16384, checkpointing=checkpointing
        ).to_dict()
        _timeline_is(page, data)
        peak = next(p for p in data["phases"] if p["name"] == data["peak_phase"])
        text = page.inner_text("#step")  # the step's words name the same peak
        assert peak["label"] in text and gb(peak["total_bytes"]) in text, text
    shot(page, "timeline-step-17", full=False)
    # every training category has its own colour and name in the legend
    legend = page.eval_on_selector_all(
        "#legend .legend-item .swatch",
        "ss => ss.map(s => [s.className, getComputedStyle(s).backgroundColor, s.parentElement.innerText])",
    )
    colours = [colour for _, colour, _ in legend]
    assert len(set(colours)) == len(colours) and "rgba(0, 0, 0, 0)" not in colours, legend
    assert not any(name.strip() in ("master", "comm", "transient") for *_, name in legend), legend
    to_step(page, 21)  # a drill: the shapes, no numbers until answered
    assert set(
        page.eval_on_selector_all("#timeline .phase-total", "ts => ts.map(t => t.innerText)")
    ) == {"?"}
    assert page.locator("#timeline-peak").count() == 0
    to_step(page, 1)  # serving: no timeline
    assert page.locator("#timeline").is_hidden()


# --- the simulation ---------------------------------------------------------------------------


def test_context_slider_repaints_and_its_latency_is_measured(page: Any) -> None:
    open_page(page, "#/playground?gpu_memory=80GB&gpus=1")

    def kv_row() -> str:
        return str(page.text_content("#bill tr[data-key='kv_cache'] td.num"))

    assert kv_row() == gb(
        gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1).bill.item("kv_cache").bytes
    )
    latencies = []
    page.focus("#c-context-range")
    for context in (5888, 8192, 11520, 16384):  # 2^12.5 rounds to 5888; then 2^13 ...
        page.evaluate("delete document.body.dataset.latency")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("document.body.dataset.latency !== undefined")
        plan = gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1, context=context)
        assert page.input_value("#c-context") == str(context)
        assert kv_row() == gb(plan.bill.item("kv_cache").bytes)
        assert page.text_content("#total-bytes") == gb(plan.per_gpu_total_bytes)
        latencies.append(int(page.get_attribute("body", "data-latency") or 9999))
    # measured here and printed; the < 100 ms target is checked by bench/web_latency.py (the
    # guide keeps timing out of test assertions: a hang is caught by the waits above)
    print(f"input to repaint: {latencies} ms, median {statistics.median(latencies)} ms")
    assert all(latency >= 0 for latency in latencies), latencies
    shot(page, "context-16k")


def test_hover_and_keyboard_focus_show_the_formula_inside_the_window(page: Any) -> None:
    open_page(page, "#/playground?gpu_memory=80GB&gpus=1")
    page.hover("#gpus g[data-gpu='7'] rect[data-key='weights']")
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    assert "8.03 B × 2 bytes = 16.06 GB" in tip.inner_text()
    box = tip.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= DESKTOP["width"]
    assert box["y"] >= 0 and box["y"] + box["height"] <= DESKTOP["height"]
    page.mouse.move(0, 0)
    page.focus("#gpus g[data-gpu='0'] rect[data-key='kv_cache']")
    tip.wait_for(state="visible")
    assert "2 × 32 layers × 8 KV heads" in tip.inner_text()


def test_shared_url_restores_the_same_state(page: Any, browser: Any) -> None:
    open_page(page, "#/playground")
    change(page, "fill", "#c-model", "qwen3-8b")
    for select, value in (("#c-kvdtype", "fp8"), ("#c-gpu", "h200")):
        change(page, "select", select, value)
    for field, value in (("#c-context", "32768"), ("#c-users", "12"), ("#c-gpus", "2")):
        change(page, "fill", field, value)
    url = page.input_value("#share-url")
    total = page.text_content("#total-bytes")
    plan = gpuplan.serve("qwen3-8b", "h200", kv_dtype="fp8", context=32768, users=12, gpus=2)
    assert total == gb(plan.per_gpu_total_bytes)
    other = browser.new_context(viewport=DESKTOP)
    other.set_default_timeout(HANG_MS)
    pg2 = other.new_page()
    pg2.goto(url)
    pg2.wait_for_selector("body[data-rendered]")
    assert pg2.input_value("#c-model") == "qwen3-8b"
    assert pg2.input_value("#c-kvdtype") == "fp8"
    assert pg2.input_value("#c-context") == "32768"
    assert pg2.input_value("#c-users") == "12"
    assert pg2.text_content("#total-bytes") == total
    other.close()


def test_speed_box_shows_the_apis_speed(page: Any, shared_desktop: Shared) -> None:
    """Opening "Speed" asks /api/serve for the layout's speed and shows its TTFT / TPOT / ITL
    and where the time goes: the figures are the API's for the body the page sent."""
    from gpuplan.web.compute import handle

    open_page(page, "#/playground")
    change(page, "fill", "#c-users", "8")
    shared_desktop.posts.clear()
    page.click("#speed-box summary")
    page.wait_for_selector("#speed tbody tr")
    body = next(b for path, b in shared_desktop.posts if path == "/api/serve" and "speed" in b)
    status, data = handle("serve", body)
    assert status == 200
    cells = page.locator("#speed tbody tr").first.locator("td").all_inner_texts()
    mean = f"{data['speed']['ttft_s']['mean'] * 1e3:,.1f}".removesuffix(".0")
    assert cells[0] == "TTFT" and cells[1] == f"{mean} ms"
    text = page.inner_text("#speed-out")
    assert "Throughput" in text and "decode" in text and "Kernel figures" in text
    page.click("#speed-box summary")  # closed again: the playground is as it was


def test_plots_and_cheat_sheet(page: Any) -> None:
    """The sweeps drawn; no two of a plot's labels overlap (HBM, budget and the curves' names
    meet at the right edge)."""
    open_page(page, "#/plots?gpu_memory=80GB&gpus=1")
    page.wait_for_selector("#plot-context path.series.kv")
    page.wait_for_selector("#plot-users path.series.total")
    page.wait_for_selector("#plot-zero path.series")
    for plot in ("#plot-context", "#plot-users", "#plot-zero"):
        assert not page.evaluate(OVERLAPS, plot), (plot, page.evaluate(OVERLAPS, plot))
    shot(page, "plots")
    page.click("a[data-tab='cheatsheet']")
    assert "16 bytes per parameter" in page.inner_text("#cheatsheet-panel")


def test_keyboard_navigation(page: Any) -> None:
    open_page(page, "#/lesson/1")
    page.keyboard.press("Tab")  # skip link
    assert page.evaluate("document.activeElement.className") == "skip"
    page.focus("#step-next")
    before = rendered(page)
    page.keyboard.press("Enter")
    wait_render(page, before)
    assert page.inner_text("#step-title") == STEPS[1]["title"]
    unlabelled = page.evaluate(
        """[...document.querySelectorAll('#controls input, #controls select, #controls textarea')]
        .filter(e => e.type !== 'radio' && e.type !== 'checkbox' && !(e.labels && e.labels.length))
        .map(e => e.id)"""
    )
    assert unlabelled == []


# --- the third edition's items ---------------------------------------------------------------


def _headroom_changes_the_count(pg: Any) -> None:
    to_step(pg, 19)
    reveal(pg)
    plans = {
        h: serve(model="llama-3.1-70b", gpus="auto", context=8192, users=4, headroom=h)
        for h in (0.9, 1.0)
    }
    assert plans[0.9].gpus != plans[1.0].gpus  # the setup shows the rule, not states it
    for h, plan in plans.items():
        if h == 1.0:
            change(pg, "fill", "#c-headroom", "1")
        assert f"{plan.gpus} × H100" in headline(pg, "gpu_count"), headline(pg, "gpu_count")
        assert gb(plan.per_gpu_total_bytes) in headline(pg, "total")
        assert not pg.evaluate(OVERLAPS, "#gpus"), pg.evaluate(OVERLAPS, "#gpus")


def test_step_19_headroom_changes_the_gpu_count(page: Any, phone: Any) -> None:
    """90 % → 100 %: the fewest GPUs and the bill per GPU change on screen, at both sizes; the
    HBM and the 100 % line's labels do not collide."""
    _headroom_changes_the_count(page)
    _headroom_changes_the_count(phone)


def _deepseek_training(pg: Any) -> None:
    # served first, then Train with ZeRO-0 and no recompute: the engine refuses that run
    open_page(pg, "#/playground?model=deepseek-v3&zero=0&checkpointing=none")
    assert pg.locator("#gpus rect.block").count() > 0  # the serving picture
    before = rendered(pg)
    pg.check("input[name=mode][value=train]")
    wait_render(pg, before)
    verdict = pg.inner_text("#verdict")
    assert "Cannot size this" in verdict, verdict
    assert "Reset step" not in verdict, verdict  # the playground has no such button
    assert pg.locator("#gpus rect.block").count() == 0  # no serving picture under Train
    assert pg.locator(".error-ways button").count() >= 3, verdict
    shot(pg, f"playground-deepseek-refused-{pg.viewport_size['width']}")
    before = rendered(pg)
    pg.click(".error-ways button >> nth=0")  # the planner's choice: the playground's defaults
    wait_render(pg, before)
    assert pg.input_value("#c-zero") == "auto" and pg.input_value("#c-ckpt") == "auto"
    verdict = pg.inner_text("#verdict")
    assert "Cannot size this" not in verdict, verdict
    plan = gpuplan.train("deepseek-v3")  # the defaults: ZeRO and checkpointing the planner's
    assert gb(plan.per_gpu_total_bytes) in verdict and f"{plan.gpus} ×" in verdict, verdict
    assert pg.locator("#c-lora-rank").is_hidden()  # a full fine-tune has no rank
    shot(pg, f"playground-deepseek-train-{pg.viewport_size['width']}")


def test_playground_never_dead_ends(page: Any, phone: Any) -> None:
    """DeepSeek-V3 training from the playground's defaults: a plan (ZeRO and checkpointing are
    the planner's choice), or the ways out; no hint names a button the playground lacks."""
    _deepseek_training(page)
    _deepseek_training(phone)


def test_playground_model_field_and_menus(page: Any) -> None:
    """A catalog name, a Hugging Face id or a pasted config.json; the precision menu grouped;
    int4 weights say what the KV cache is held in; LoRA's rank only for LoRA."""
    open_page(page, "#/playground?gpus=1")
    change(page, "fill", "#c-model", "meta-llama/Llama-3.1-70B")
    page.press("#c-model", "Enter")
    page.wait_for_function("document.querySelector('#verdict').innerText.includes('H100')")
    plan = gpuplan.serve("llama-3.1-70b", gpus=1)
    page.wait_for_function(
        f"document.querySelector('#total-bytes')?.textContent === {json.dumps(gb(plan.per_gpu_total_bytes))}"
    )
    page.click("#paste-toggle")
    from gpuplan.catalog.models import _catalog_config

    config = _catalog_config("llama-3.1-8b")
    change(page, "fill", "#c-config", json.dumps(config))
    eight = gpuplan.serve("llama-3.1-8b", gpus=1)
    assert page.text_content("#total-bytes") == gb(eight.per_gpu_total_bytes)
    page.click("#paste-toggle")
    page.wait_for_selector("#c-model:visible")
    groups = page.eval_on_selector_all("#c-dtype optgroup", "gs => gs.map(g => g.label)")
    assert len(groups) >= 3 and groups[0] == "Common", groups
    change(page, "select", "#c-dtype", "int4")
    kv = gpuplan.serve("llama-3.1-8b", gpus=1, dtype="int4").to_dict()["kv_dtype"]
    assert f"held in {kv}" in page.inner_text("#kv-note")
    page.check("input[name=mode][value=train]")
    page.wait_for_function("document.body.dataset.mode === 'train'")
    assert page.locator("#c-lora-rank").is_hidden()
    change(page, "select", "#c-method", "lora")
    assert page.locator("#c-lora-rank").is_visible()
    for knob in ("#c-zero", "#c-ckpt"):
        assert "the planner's choice" in page.inner_text(knob)
