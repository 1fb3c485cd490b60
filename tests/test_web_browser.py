"""The web app in a real Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Screenshots go to test-artifacts/. Skipped, with the reason, where Chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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


def gb(n: int) -> str:
    return f"{n / 1e9:,.2f} GB"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, base_url):  # type: ignore[no-untyped-def]
    # bypass_csp only so the tests may evaluate expressions; test_page_loads_* keeps the CSP
    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base = base_url  # type: ignore[attr-defined]
    yield pg
    context.close()
    assert not errors, errors


def shot(pg, name: str) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def rendered(pg) -> int:  # type: ignore[no-untyped-def]
    return int(pg.get_attribute("body", "data-rendered") or 0)


def wait_render(pg, after: int) -> None:  # type: ignore[no-untyped-def]
    pg.wait_for_function(f"Number(document.body.dataset.rendered || 0) > {after}", timeout=10_000)


def open_page(pg, path: str) -> None:  # type: ignore[no-untyped-def]
    pg.goto(pg.base + "/" + path)
    pg.wait_for_selector("body[data-rendered]", timeout=15_000)


def kv_row(pg) -> str:  # type: ignore[no-untyped-def]
    return pg.inner_text("#bill tr[data-key='kv_cache'] td.num")


def _load_clean(browser, base_url: str, name: str, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    pg = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    pg.on("request", lambda r: requests.append(r.url))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(base_url + "/#/playground")
    pg.wait_for_selector("body[data-rendered]", timeout=15_000)
    pg.wait_for_selector("#gpus rect.block")
    assert "Fits" in pg.inner_text("#verdict")
    outside = [u for u in requests if not u.startswith(base_url) and not u.startswith("data:")]
    assert not outside, outside
    assert not errors, errors
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= size[0] + 1, f"horizontal scroll at {size}: {width}"
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"playground-{name}.png"), full_page=True)
    context.close()


def test_page_loads_with_no_external_requests(browser, base_url) -> None:  # type: ignore[no-untyped-def]
    """With the real Content-Security-Policy: at 1280×800 and at phone width."""
    _load_clean(browser, base_url, "desktop", (1280, 800))
    _load_clean(browser, base_url, "phone", (390, 844))


def test_lesson_first_steps(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/lesson/1")
    plan = gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1)
    assert pg.inner_text("#step-title") == "The question you are always asked"
    assert pg.inner_text("#total-bytes") == gb(plan.per_gpu_total_bytes)  # 19.10 GB
    assert "19.10 GB of 80.00 GB" in pg.inner_text("#verdict")
    shot(pg, "lesson-step-1")

    before = rendered(pg)
    pg.click("#step-next")
    wait_render(pg, before)
    assert pg.inner_text("#step-title") == "The 70B model on one GPU"
    assert pg.locator("#oom-marker").count() == 1
    plan = gpuplan.serve("llama-3.1-70b", gpu_memory="80GB", gpus=1)
    over = plan.per_gpu_total_bytes - 80_000_000_000
    assert gb(over) in pg.text_content("#oom-marker")
    shot(pg, "lesson-step-2-oom")

    before = rendered(pg)
    pg.click("#step-next")
    wait_render(pg, before)
    assert pg.inner_text("#step-title") == "Precision is a memory dial"
    before = rendered(pg)
    pg.select_option("#c-dtype", "int4")
    wait_render(pg, before)
    plan = gpuplan.serve("llama-3.1-70b", gpu_memory="80GB", gpus=1, dtype="int4")
    assert pg.inner_text("#total-bytes") == gb(plan.per_gpu_total_bytes)
    assert "Fits" in pg.inner_text("#verdict")
    # progress survives a reload
    pg.reload()
    pg.wait_for_selector("body[data-rendered]")
    assert "3 of 23 steps visited" in pg.inner_text("#step-progress")


def test_context_slider_moves_the_kv_block_to_the_engines_numbers(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/playground?gpu_memory=80GB&gpus=1")
    assert kv_row(pg) == gb(
        gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1).bill.item("kv_cache").bytes
    )
    height_before = float(
        pg.get_attribute("#gpus g[data-gpu='0'] rect[data-key='kv_cache']", "height")
    )
    latencies = []
    pg.focus("#c-context-range")
    for context in (5888, 8192, 11520, 16384):  # 2^12.5 rounds to 5888; then 2^13 ...
        before = rendered(pg)
        pg.keyboard.press("ArrowRight")
        wait_render(pg, before)
        plan = gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1, context=context)
        assert pg.input_value("#c-context") == str(context)
        assert kv_row(pg) == gb(plan.bill.item("kv_cache").bytes)
        assert pg.inner_text("#total-bytes") == gb(plan.per_gpu_total_bytes)
        latencies.append(int(pg.get_attribute("body", "data-latency") or 9999))
    height_after = float(
        pg.get_attribute("#gpus g[data-gpu='0'] rect[data-key='kv_cache']", "height")
    )
    assert height_after > height_before
    latencies.sort()
    assert latencies[len(latencies) // 2] < 100, latencies
    shot(pg, "context-16k")


def test_hover_and_keyboard_focus_show_the_formula(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/playground?gpu_memory=80GB&gpus=1")
    pg.hover("#gpus g[data-gpu='0'] rect[data-key='weights']")
    tip = pg.locator("#tooltip")
    tip.wait_for(state="visible")
    assert "8.03 B × 2 bytes = 16.06 GB" in tip.inner_text()
    pg.mouse.move(0, 0)
    pg.focus("#gpus g[data-gpu='0'] rect[data-key='kv_cache']")
    tip.wait_for(state="visible")
    assert "2 × 32 layers × 8 KV heads" in tip.inner_text()
    shot(pg, "tooltip")


def test_break_a_plan_and_apply_the_cheapest_fix(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/playground?gpu_memory=80GB&gpus=1")
    before = rendered(pg)
    pg.select_option("#c-model", "llama-3.1-70b")
    wait_render(pg, before)
    pg.wait_for_selector("#oom-marker")
    plan = gpuplan.serve("llama-3.1-70b", gpu_memory="80GB", gpus=1)
    assert f"OOM: +{gb(plan.per_gpu_total_bytes - 80_000_000_000)}" in pg.text_content(
        "#oom-marker"
    )
    assert "Out of memory" in pg.inner_text("#verdict")
    shot(pg, "oom")
    before = rendered(pg)
    pg.click("#fixes button.cheapest")
    wait_render(pg, before)
    assert pg.locator("#oom-marker").count() == 0
    assert "Fits" in pg.inner_text("#verdict")


def test_drill_right_and_wrong(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/lesson/9")
    assert (
        "Drill" in pg.inner_text("#step-title") or pg.get_attribute("#step", "data-kind") == "drill"
    )
    truth = gpuplan.serve("llama-3.1-8b", gpu_memory="80GB", gpus=1, context=131072).to_dict()[
        "kv_bytes_per_sequence"
    ]
    pg.fill("#drill-answer", "5")
    pg.click("#drill button[type=submit]")
    pg.wait_for_selector("#drill-feedback.wrong")
    assert f"{truth / 1e9:.2f} GB" in pg.inner_text("#drill-feedback")
    shot(pg, "drill-wrong")
    pg.fill("#drill-answer", f"{truth / 1e9 * 1.02:.1f}")
    pg.click("#drill button[type=submit]")
    pg.wait_for_selector("#drill-feedback.right")
    shot(pg, "drill-right")
    pg.reload()
    pg.wait_for_selector("body[data-rendered]")
    assert "right" in (pg.get_attribute("#lesson-nav button[data-step='9']", "class") or "")


def test_shared_url_restores_the_same_state(page, browser) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/playground")
    for select, value in (("#c-model", "qwen3-8b"), ("#c-kvdtype", "fp8"), ("#c-gpu", "h200")):
        before = rendered(pg)
        pg.select_option(select, value)
        wait_render(pg, before)
    for field, value in (("#c-context", "32768"), ("#c-users", "12"), ("#c-gpus", "2")):
        before = rendered(pg)
        pg.fill(field, value)
        wait_render(pg, before)
    url = pg.input_value("#share-url")
    total = pg.inner_text("#total-bytes")
    plan = gpuplan.serve("qwen3-8b", "h200", kv_dtype="fp8", context=32768, users=12, gpus=2)
    assert total == gb(plan.per_gpu_total_bytes)
    other = browser.new_context(viewport={"width": 1280, "height": 800})
    pg2 = other.new_page()
    pg2.goto(url)
    pg2.wait_for_selector("body[data-rendered]")
    assert pg2.input_value("#c-model") == "qwen3-8b"
    assert pg2.input_value("#c-kvdtype") == "fp8"
    assert pg2.input_value("#c-context") == "32768"
    assert pg2.input_value("#c-users") == "12"
    assert pg2.inner_text("#total-bytes") == total
    pg2.screenshot(path=str(ARTIFACTS / "shared-url.png"), full_page=True)
    other.close()


def test_plots_and_cheat_sheet(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/plots?gpu_memory=80GB&gpus=1")
    pg.wait_for_selector("#plot-context path.series.kv")
    pg.wait_for_selector("#plot-users path.series.total")
    shot(pg, "plots")
    pg.click("a[data-tab='cheatsheet']")
    assert "16 bytes per parameter" in pg.inner_text("#cheatsheet-panel")
    shot(pg, "cheatsheet")


def test_keyboard_navigation(page) -> None:  # type: ignore[no-untyped-def]
    pg = page
    open_page(pg, "#/lesson/1")
    pg.keyboard.press("Tab")  # skip link
    assert pg.evaluate("document.activeElement.className") == "skip"
    pg.focus("#step-next")
    before = rendered(pg)
    pg.keyboard.press("Enter")
    wait_render(pg, before)
    assert pg.inner_text("#step-title") == "The 70B model on one GPU"
    # every control has a label
    unlabelled = pg.evaluate(
        """[...document.querySelectorAll('#controls input, #controls select, #controls textarea')]
        .filter(e => e.type !== 'radio' && e.type !== 'checkbox' && !(e.labels && e.labels.length))
        .map(e => e.id)"""
    )
    assert unlabelled == []
