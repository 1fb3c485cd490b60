"""Latency of the web API on loopback, and the page's time to first render.

    python bench/web_latency.py [--requests 2000] [--no-browser]

Starts `gpuplan.web.app:create_app` under uvicorn in a child process on 127.0.0.1 (a free
port), sends a bounded number of POST /api/serve requests over one keep-alive connection, and
prints p50/p99/max. Target: p99 under 20 ms for a serving bill. Then, if /usr/bin/chromium is
there, loads the page a few times and prints the time from navigation to the first drawn bill,
and drives the context slider and a lesson step's ZeRO stage from the keyboard and prints the time
from each input to the repainted picture (the page's own `data-latency`: input event → engine
answer drawn → next animation frame). Target: median under 100 ms. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

MAX_REQUESTS = 2000
TIME_LIMIT_S = 120
CHROMIUM = "/usr/bin/chromium"
BODY = {"model": "llama-3.1-8b", "gpu": "h100", "gpu_memory": "80GB", "context": 8192, "users": 4}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int) -> subprocess.Popen[bytes]:
    src = Path(__file__).resolve().parent.parent / "src"
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "gpuplan.web.app:create_app"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env)


def wait_up(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/api/features", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def percentile(sorted_ms: list[float], q: float) -> float:
    k = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[k]


def api_latency(url: str, n: int) -> dict[str, float]:
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=url, timeout=10) as client:
        for _ in range(50):  # warm up: imports, caches, connection
            client.post("/api/serve", json=BODY).raise_for_status()
        stop = time.monotonic() + TIME_LIMIT_S
        for i in range(n):
            body = dict(BODY, context=1024 + i)  # every request distinct: no answer cache
            t0 = time.perf_counter()
            r = client.post("/api/serve", json=body)
            times.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            if time.monotonic() > stop:
                break
    times.sort()
    return {
        "requests": len(times),
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "max_ms": times[-1],
        "mean_ms": statistics.fmean(times),
    }


def first_render(url: str, loads: int = 5) -> list[float]:
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        for _ in range(loads):
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.goto(url + "/#/playground")
            page.wait_for_selector("body[data-rendered]", timeout=15_000)
            out.append(float(page.evaluate("window.gpuplanFirstRender")))
            context.close()
        browser.close()
    return out


def input_to_repaint(url: str, presses: int = 40) -> dict[str, list[int]]:
    """Milliseconds from a keyboard input to the repainted picture, as the page measures it."""
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    out: dict[str, list[int]] = {}
    cases = (
        (
            "playground: context slider",
            "/#/playground?gpu_memory=marketed&gpus=1",
            "#c-context-range",
        ),
        ("lesson step 13: ZeRO stage", "/#/lesson/13", "#c-zero"),
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
        page = context.new_page()
        for name, path, control in cases:
            page.goto(url + path)
            page.wait_for_selector("body[data-rendered]", timeout=15_000)
            page.wait_for_function("!document.body.dataset.busy")
            page.focus(control)
            times = []
            for i in range(presses):
                page.evaluate("delete document.body.dataset.latency")
                page.keyboard.press("ArrowDown" if (i // 3) % 2 == 0 else "ArrowUp")
                try:
                    page.wait_for_function(
                        "document.body.dataset.latency !== undefined", timeout=5000
                    )
                except Exception:  # a key that changed nothing (end of a range)
                    continue
                times.append(int(page.get_attribute("body", "data-latency") or 0))
            out[name] = times
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=MAX_REQUESTS)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    n = max(1, min(args.requests, MAX_REQUESTS))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port)
    try:
        wait_up(url)
        stats = api_latency(url, n)
        print(
            f"POST /api/serve x{stats['requests']} (loopback, keep-alive): "
            f"p50 {stats['p50_ms']:.2f} ms  p99 {stats['p99_ms']:.2f} ms  "
            f"max {stats['max_ms']:.2f} ms  mean {stats['mean_ms']:.2f} ms"
            f"  [target p99 < 20 ms: {'met' if stats['p99_ms'] < 20 else 'MISSED'}]"
        )
        if not args.no_browser and Path(CHROMIUM).exists():
            renders = first_render(url)
            print(
                f"page: navigation to first drawn bill, {len(renders)} cold loads: median "
                f"{statistics.median(renders):.0f} ms, max {max(renders):.0f} ms"
            )
            for name, times in input_to_repaint(url).items():
                times.sort()
                median = statistics.median(times)
                print(
                    f"input to repaint, {name}: {len(times)} inputs, median {median:.0f} ms,"
                    f" p95 {percentile([float(t) for t in times], 95):.0f} ms, max {times[-1]} ms"
                    f"  [target median < 100 ms: {'met' if median < 100 else 'MISSED'}]"
                )
        elif not args.no_browser:
            print(f"page: skipped ({CHROMIUM} is missing)")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
