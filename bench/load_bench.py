"""Load on the web server: mixed requests from concurrent clients against `gpuplan web`.

    python bench/load_bench.py [--requests 2000] [--clients 32] [--seed 0]

Starts `gpuplan web` (uvicorn, its worker pool, loopback) in a child process on a free port and
sends a fixed, seeded mix of requests from 32 concurrent clients: serving bills and plans over
catalog models, GPUs, contexts and users; training bills with fixed and searched layouts;
sweeps like the page's plots; catalog reads; and requests that must be refused (schema errors
422, engine refusals 400, over the work budget 422). An *error* is a failed connection, a
5xx, or a status other than the one the request must get. Prints the counts, p50/p99/max
latency, throughput, and the server's memory (the server process and its workers) before and
after. Exit status 1 if any request errored. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODELS = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mixtral-8x7b", "gemma-2-9b-it"]
BIG = ["llama-3.1-70b", "qwen2.5-72b-instruct", "deepseek-v2-lite", "qwen3-30b-a3b"]
GPUS = ["h100", "a100-80gb", "l40s", "a10g", "h200", "mi300x"]
CONTEXTS = [512, 2048, 4096, 8192, 32768, 131072]


def request_mix(n: int, seed: int) -> list[tuple[str, str, Any, int]]:
    """(method, path, JSON body or None, the status it must get), n of them, seeded."""
    rng = random.Random(seed)
    out: list[tuple[str, str, Any, int]] = []
    for _ in range(n):
        roll = rng.random()
        serve = {
            "model": rng.choice(MODELS + BIG),
            "gpu": rng.choice(GPUS),
            "context": rng.choice(CONTEXTS),
            "users": rng.choice([1, 4, 16, 64]),
        }
        if roll < 0.35:
            out.append(("POST", "/api/serve", serve, 200))
        elif roll < 0.45:
            out.append(("POST", "/api/plan", serve, 200))
        elif roll < 0.55:
            body = {"model": rng.choice(MODELS), "gpu": "h100", "gpus": rng.choice([8, 16])}
            out.append(("POST", "/api/train", {**body, "zero": rng.choice([1, 2, 3])}, 200))
        elif roll < 0.60:
            out.append(("POST", "/api/train", {"model": rng.choice(MODELS), "gpu": "h100"}, 200))
        elif roll < 0.72:
            fixed = {**serve, "model": rng.choice(MODELS), "gpus": 8, "gpu": "h100"}
            vary, values = rng.choice([("context", CONTEXTS), ("users", [1, 2, 4, 8, 16, 32])])
            out.append(("POST", "/api/sweep", {"base": fixed, "vary": vary, "values": values}, 200))
        elif roll < 0.85:
            path = rng.choice(["/api/models", "/api/gpus", "/api/precisions", "/api/features", "/"])
            out.append(("GET", path, None, 200))
        elif roll < 0.90:
            out.append(("POST", "/api/serve", {**serve, "context": 0}, 422))
        elif roll < 0.95:
            out.append(
                (
                    "POST",
                    "/api/serve",
                    {**serve, "model": "no-such-model-" + str(rng.random())},
                    400,
                )
            )
        else:
            heavy = {
                "mode": "train",
                "base": {"model": "deepseek-r1", "gpu": "a10g"},
                "vary": "seq",
                "values": [1024 * (i + 1) for i in range(64)],
            }
            out.append(("POST", "/api/sweep", heavy, 422))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_rss_mib(pid: int) -> float:
    """Resident memory of `pid` and its child processes (Linux /proc), MiB."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                pids.append(int(entry.name))
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def start_server(port: int) -> subprocess.Popen[bytes]:
    src = Path(__file__).resolve().parent.parent / "src"
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, "-m", "gpuplan.cli.main", "web", "--port", str(port)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)


async def wait_up(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=url, timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get("/api/features")).status_code == 200:
                    return
            except httpx.HTTPError:
                await asyncio.sleep(0.2)
    raise SystemExit("server did not start")


async def run_load(url: str, mix: list[tuple[str, str, Any, int]], clients: int) -> dict[str, Any]:
    import httpx

    queue: asyncio.Queue[tuple[str, str, Any, int]] = asyncio.Queue()
    for item in mix:
        queue.put_nowait(item)
    times: list[float] = []
    errors: list[str] = []
    statuses: dict[int, int] = {}

    async def client_loop() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            while True:
                try:
                    method, path, body, want = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                try:
                    r = await client.request(method, path, json=body)
                    status = r.status_code
                except httpx.HTTPError as err:
                    errors.append(f"{method} {path}: {err.__class__.__name__}")
                    continue
                times.append((time.perf_counter() - t0) * 1000)
                statuses[status] = statuses.get(status, 0) + 1
                if status != want:
                    errors.append(f"{method} {path}: {status}, expected {want}: {r.text[:120]}")

    start = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    wall = time.perf_counter() - start
    times.sort()
    return {"times": times, "errors": errors, "statuses": statuses, "wall": wall}


def pct(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port)
    try:
        asyncio.run(wait_up(url))
        time.sleep(1.0)  # let the worker pool finish starting
        before = tree_rss_mib(server.pid)
        mix = request_mix(args.requests, args.seed)
        result = asyncio.run(run_load(url, mix, args.clients))
        after = tree_rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=10)
    t = result["times"]
    codes = ", ".join(f"{k}: {v}" for k, v in sorted(result["statuses"].items()))
    print(
        f"{len(mix)} mixed requests, {args.clients} concurrent clients, loopback:"
        f" {len(result['errors'])} errors; statuses {codes}"
    )
    print(
        f"latency p50 {pct(t, 50):.1f} ms  p99 {pct(t, 99):.1f} ms  max {t[-1]:.1f} ms"
        f"  mean {statistics.fmean(t):.1f} ms; {len(t) / result['wall']:.0f} requests/s"
        f" ({result['wall']:.1f} s)"
    )
    print(f"server memory (server + workers): {before:.0f} MiB before, {after:.0f} MiB after")
    for line in result["errors"][:10]:
        print("  error:", line)
    sys.exit(1 if result["errors"] else 0)


if __name__ == "__main__":
    main()
