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

import gpuplan  # noqa: E402
from gpuplan.web.app import create_app  # noqa: E402

LESSON = json.loads(
    (Path(__file__).resolve().parent.parent / "src/gpuplan/web/static/lesson.json").read_text()
)
STEPS = LESSON["steps"]
LESSON_MEMORY = "marketed"
README_SHOTS = {
    "desktop": 13,
    "phone": 20,
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
        self.pg.on("pageerror", lambda e: self.errors.append(str(e)))
        self.pg.on("console", self._console)
        self.pg.on("request", lambda r: self.requests.append(r.url))

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
    elif action == "check":
        pg.check(selector)
    else:
        pg.fill(selector, value)
    wait_render(pg, before)


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


def test_every_step_in_view_at_1280x800(page: Any, shared_desktop: Shared) -> None:
    """Picture and step text both in the viewport without scrolling; only the step's controls,
    highlighted; one selected tab; a screenshot per step; nothing requested off the machine."""
    open_page(page, "#/lesson/1")
    page.evaluate("window.scrollTo(0, 0)")
    (ARTIFACTS / "lesson").mkdir(parents=True, exist_ok=True)
    for step in STEPS:
        n = step["id"]
        to_step(page, n)
        box = page.evaluate(IN_VIEW)
        assert box["scrollY"] == 0, (n, box)
        for part in ("title", "text", "question", "picture"):
            top, bottom, height = box[part]
            assert height > 0 and top >= 0 and bottom <= box["vh"], (n, part, box[part])
        shown = page.evaluate(CONTROLS)
        mode_controls = {c for c in step["controls"]}
        assert set(shown) == mode_controls, (n, shown, step["controls"])
        highlighted = page.evaluate(
            "[...document.querySelectorAll('#controls .ctl.used')].map(c => getComputedStyle(c).outlineStyle)"
        )
        assert all(style == "solid" for style in highlighted), (n, highlighted)
        assert page.locator("header nav [aria-current='page']").count() == 1
        assert page.get_attribute("header nav [aria-current='page']", "data-tab") == "lesson"
        # animations="disabled": the blocks drawn where they settle, not mid-transition
        page.screenshot(
            path=str(ARTIFACTS / "lesson" / f"step-{n:02d}-desktop.png"), animations="disabled"
        )
        if n == README_SHOTS["desktop"]:  # the README's picture (docs/lesson-desktop.jpg)
            page.screenshot(
                path=str(ARTIFACTS / "lesson-desktop.jpg"),
                type="jpeg",
                quality=60,
                animations="disabled",
            )
    # the rest of the controls are one click away
    to_step(page, 13)
    page.click("#more-controls")
    assert len(page.evaluate(CONTROLS)) > 10
    page.click("#more-controls")
    assert page.evaluate(CONTROLS) == ["zero"]
    outside = [u for u in shared_desktop.requests if not u.startswith(page.base)]
    assert not outside, outside


def test_every_step_legible_on_a_phone(phone: Any, shared_phone: Shared) -> None:
    """390×844: the picture first, no text under 11 px, no sideways scroll; a screenshot each."""
    open_page(phone, "#/lesson/1")
    for step in STEPS:
        n = step["id"]
        to_step(phone, n)
        small = phone.evaluate(SMALL_TEXT)
        assert not small, (n, small[:5])
        picture = phone.locator("#gpus").bounding_box()
        title = phone.locator("#step-title").bounding_box()
        assert picture["y"] < title["y"], n
        assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1, n
        phone.screenshot(path=str(ARTIFACTS / "lesson" / f"step-{n:02d}-phone.png"))
        if n == README_SHOTS["phone"]:  # the README's picture (docs/lesson-phone.jpg)
            phone.screenshot(path=str(ARTIFACTS / "lesson-phone.jpg"), type="jpeg", quality=60)
    outside = [u for u in shared_phone.requests if not u.startswith(phone.base)]
    assert not outside, outside


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
    first = serve(model="llama-3.1-8b", gpus=1)
    assert first.weights_bytes == 2 * n8 and gb(2 * n8) in headline(page, "weights")
    assert round(first.per_gpu_total_bytes / 1e9) == 19
    assert f"{gb(first.per_gpu_total_bytes)}" in headline(page, "total")
    assert "of 80 GB" in headline(page, "total")

    to_step(page, 5)  # 2 × 32 layers × 8 KV heads × 128 × 2 bytes per token; 17 GB at 128k
    per_token = 2 * 32 * 8 * 128 * 2
    assert f"{per_token:,} bytes per token" in headline(page, "kv")
    assert gb(per_token * 4096) in headline(page, "kv")
    change(page, "fill", "#c-context", "131072")
    assert gb(per_token * 131072) in headline(page, "kv")
    assert round(per_token * 131072 / 1e9) == 17

    to_step(page, 10)
    # 16 bytes per parameter: 2 weights + 2 gradients + 12 optimizer
    assert gb(16 * n8) in headline(page, "model_states")

    to_step(page, 13)  # ZeRO on 8 GPUs: 16N, 4N + 12N/8, 2N + 14N/8, 16N/8
    text = headline(page, "zero_stages")
    for stage, expected in enumerate((16 * n8, 4 * n8 + 12 * n8 / 8, 2 * n8 + 14 * n8 / 8, 2 * n8)):
        assert f"ZeRO-{stage} {gb(expected)}" in text, (stage, text)

    to_step(page, 14)  # ZeRO-3 moves 1.5 × the traffic of plain data parallelism
    plan = train(model="llama-3.1-8b", gpus=8, zero=3)
    text = headline(page, "traffic")
    assert gb(plan.comm_bytes_per_step) in text and "1.5 ×" in text, text

    to_step(page, 17)  # full recompute: a third more compute, 25 % fewer tokens per second
    change(page, "check", "#c-ckpt", "")
    text = headline(page, "tokens")
    plan = train(model="llama-3.1-8b", gpus=8, zero=3, seq=16384, checkpointing="full")
    assert f"{plan.tokens_per_second:,.0f}" in text and "−25 %" in text, text
    assert gb(plan.activations_bytes) in headline(page, "activations")

    to_step(page, 18)  # lower bound vs chosen, and why
    # the page's recompute checkbox is off: the search keeps it off (as checkpointing=False)
    plan = train(model="llama-3.1-70b", gpus="auto", zero=3, checkpointing=False)
    states = train(model="llama-3.1-70b", gpus=1, zero=0).model_states_bytes
    bound = math.ceil(states / (0.9 * 80e9))
    assert plan.lower_bound_gpus == bound == 16
    text = headline(page, "gpu_count")
    assert f"{plan.gpus} × H100" in text and f"lower bound {bound}" in text, text
    assert plan.why_this_many()[-1].split(": ", 1)[1] in text
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
    change(page, "select", "#c-model", "llama-3.1-70b")
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
    assert "stale" in (page.get_attribute("#gpus", "class") or "")
    assert "stale" in (page.get_attribute("#details", "class") or "")
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
    _timeline_is(
        page, train(model="llama-3.1-8b", gpus=8, zero=0, seq=8192, micro_batch=4).to_dict()
    )
    to_step(page, 17)
    for checkpointing in (False, "full"):
        if checkpointing:
            change(page, "check", "#c-ckpt", "")
        data = train(
            model="llama-3.1-8b", gpus=8, zero=3, seq=16384, checkpointing=checkpointing
        ).to_dict()
        _timeline_is(page, data)
        peak = next(p for p in data["phases"] if p["name"] == data["peak_phase"])
        text = page.inner_text("#step-text")  # the step's words name the same peak
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
    for select, value in (("#c-model", "qwen3-8b"), ("#c-kvdtype", "fp8"), ("#c-gpu", "h200")):
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


def test_plots_and_cheat_sheet(page: Any) -> None:
    open_page(page, "#/plots?gpu_memory=80GB&gpus=1")
    page.wait_for_selector("#plot-context path.series.kv")
    page.wait_for_selector("#plot-users path.series.total")
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
