"""Accuracy of gpuplan's engine adapters against real startup logs, by engine version and GPU.

    PYTHONPATH=src python3 bench/engine_accuracy.py            # per-case table + summary
    PYTHONPATH=src python3 bench/engine_accuracy.py --markdown # the same, as the README table
    PYTHONPATH=src python3 bench/engine_accuracy.py --fit      # the fitted constants, with
                                                              # leave-one-GPU-out and
                                                              # leave-one-version-out errors
    PYTHONPATH=src python3 bench/engine_accuracy.py --logo     # every fitted term refitted
                                                              # without each GPU type
                                                              # (bench/engine_logo.py)

Cases: tests/data/engine_logs/*.json (tests/engine_cases.py reads them). Each is predicted from
its model's config.json, its GPU, its engine version and the launch arguments its source
states; weights, KV-cache memory and KV tokens (V0: GPU blocks) are compared. A failed start
counts as correct when gpuplan also predicts a failure. Targets (issue 11): KV tokens within
10 % on >= 80 % of the cases whose inputs are known, weights within 2 % on >= 95 %, every
failed start predicted as a failure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import engine_logo  # noqa: E402
from engine_cases import (  # noqa: E402
    ALL_LOG_FILES,
    GPU_CLASSES,
    LlamaCppResult,
    Result,
    class_counts,
    false_alarms,
    gpu_class,
    llamacpp_records,
    load_cases,
    predict,
    predict_llamacpp,
    predict_trtllm_engine,
    summary_counts,
    trtllm_records,
)
from gpuplan.engine.profiles.common import padded_vocab  # noqa: E402
from gpuplan.engine.profiles.vllm.rules import rules_at  # noqa: E402

GIB = 2**30


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.1f}%"


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISS")


def version_group(r: Result) -> str:
    c = r.case
    v = c.version or "?"
    if c.engine != "vllm":
        return f"{c.engine} {v}"
    major_minor = ".".join(v.split(".")[:2]) if v != "?" else "?"
    engine = (
        "V0"
        if c.args.get("vllm_engine") == "v0"
        or (v != "?" and tuple(int(x) for x in v.split(".")[:2]) < (0, 8))
        else "V1"
    )
    return f"vllm {major_minor} ({engine})"


def table(results: list[Result], markdown: bool) -> list[str]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(version_group(r), r.case.gpu)].append(r)
    lines = []
    if markdown:
        lines += [
            "| version | GPU | case | weights | KV memory | KV tokens | outcome |",
            "|---|---|---|---:|---:|---:|---|",
        ]
    for (version, gpu), rs in sorted(groups.items()):
        if not markdown:
            lines.append(f"\n== {version} · {gpu} ({len(rs)} cases)")
        for r in rs:
            c = r.case
            outcome = (
                ("failed → predicted " + ("failure" if r.predicted_fail else "start"))
                if c.failed
                else ("refused: " + (r.refused or "")[:40] if r.refused else "")
            )
            known = "" if c.inputs_known else " (inputs partly unknown)"
            if markdown:
                lines.append(
                    f"| {version} | {gpu} | {c.case_id}{known} | {_pct(r.weights_err)} |"
                    f" {_pct(r.kv_mem_err)} | {_pct(r.tokens_err)} | {outcome} |"
                )
            else:
                lines.append(
                    f"  {c.case_id[:62]:<62} W {_pct(r.weights_err):>7} {_mark(r.weights_ok):<4}"
                    f" KVmem {_pct(r.kv_mem_err):>8} tokens {_pct(r.tokens_err):>8}"
                    f" {_mark(r.kv_ok):<4}{known} {outcome}"
                )
    return lines


def summary(results: list[Result]) -> list[str]:
    counts = summary_counts(results)
    w, nw = counts["weights"]
    k, nk = counts["kv"]
    f, nf = counts["failed_starts"]
    gpus = sorted({r.case.gpu for r in results})
    versions = sorted({version_group(r) for r in results})
    return [
        f"cases: {len(results)} ({len(gpus)} GPU types: {', '.join(gpus)})",
        f"versions: {', '.join(versions)}",
        f"weights within 2 %: {w}/{nw} ({w / nw:.0%}; target >= 95 %)",
        f"KV tokens (or KV memory) within 10 %, inputs known: {k}/{nk} ({k / nk:.0%}; target >= 80 %)",
        f"failed starts predicted as failures: {f}/{nf}",
        "false alarms (started, predicted not to start): {}/{}".format(*false_alarms(results)),
        "by GPU class (weights within 2 % | KV within 10 %, inputs known | failed starts):",
        *(
            f"  {cls:<21} {_frac(c['weights'])} | {_frac(c['kv'])} | {_frac(c['failed_starts'])}"
            for cls, c in class_counts(results).items()
        ),
    ]


def _frac(pair: tuple[int, int]) -> str:
    k, n = pair
    return f"{k}/{n}" + (f" ({k / n:.0%})" if n else "")


# --- the fitted constants, with leave-one-GPU-out / leave-one-version-out errors --------------


def activation_rows(results: list[Result]) -> list[dict[str, Any]]:
    """Cases with a logged activation peak: the counted terms and the path their sampler took."""
    rows = []
    for r in results:
        act = r.case.logged.get("activation_peak_gib")
        if act is None or r.bill is None or r.case.engine != "vllm":
            continue
        inputs = r.bill.item("activation_peak").inputs
        arch = r.bill.launch.arch
        rows.append(
            {
                "case": r.case.case_id,
                "gpu": r.case.gpu,
                "class": gpu_class(r.case.gpu),
                "version": version_group(r),
                "logged": act * GIB,
                "forward": inputs["forward_bytes"],  # V0: its eager forward replayed
                "rest": inputs["hidden_bytes"] + inputs["moe_workspace_bytes"],
                "elements": min(inputs["max_num_seqs"], inputs["max_num_batched_tokens"])
                * padded_vocab(arch.vocab_size),
                "sampler": bool(inputs["sampler_bytes"]),
                "path": inputs["sampler"],
                "encoder": inputs["encoder_bytes"],
            }
        )
    return rows


def model_act(row: dict[str, Any], c0: float, b: dict[str, float]) -> float:
    sampling = row["elements"] * b[row["path"]] + row["rest"] if row["sampler"] else 0
    return c0 + row["encoder"] + max(row["forward"], sampling)


def fit_params(rows: list[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """The constant c0 and the bytes per logit element of each sampler path, fitted robustly:
    c0 the median residual over every row, each path's bytes the median each of its logs
    implies given c0 (two rounds)."""
    c0 = 0.12 * GIB
    b: dict[str, float] = {}
    for _ in range(2):
        for path in {r["path"] for r in rows}:
            implied = [
                (r["logged"] - c0 - r["encoder"] - r["rest"]) / r["elements"]
                for r in rows
                if r["path"] == path
                and r["sampler"]
                and r["elements"]
                and r["elements"] * 4 > r["forward"]  # the sampler moment can dominate
            ]
            implied = [x for x in implied if x > 0]
            if implied:
                b[path] = statistics.median(implied)
        residuals = [
            r["logged"]
            - (model_act(r, 0.0, b) if r["path"] in b or not r["sampler"] else r["logged"])
            for r in rows
        ]
        c0 = statistics.median(residuals)
    return c0, b


def leave_out(rows: list[dict[str, Any]], key: str) -> list[tuple[str, float, float]]:
    """For each group of `key`: fit on the others, predict the group; (group, mean |err|, worst)."""
    out = []
    for group in sorted({r[key] for r in rows}):
        train = [r for r in rows if r[key] != group]
        test = [r for r in rows if r[key] == group]
        c0, b = fit_params(train)
        errs = []
        for r in test:
            if r["sampler"] and r["path"] not in b:
                continue  # a path no other group shows
            errs.append(abs(model_act(r, c0, b) - r["logged"]) / GIB)
        if errs:
            out.append((group, sum(errs) / len(errs), max(errs)))
    return out


def fit_report(results: list[Result]) -> list[str]:
    rows = activation_rows(results)
    c0, b = fit_params(rows)
    rules = rules_at("0.19.0")
    lines = [
        f"activation cases: {len(rows)}",
        f"constant c0: fitted {c0 / GIB:.3f} GiB (versions.toml: {rules['activation_constant_gib']} GiB)",
    ]
    for path, value in sorted(b.items()):
        lines.append(f"sampler bytes per logit element, {path}: fitted {value:.1f}")
    errs = [abs(model_act(r, c0, b) - r["logged"]) / GIB for r in rows]
    lines.append(
        f"in-sample mean |error| {sum(errs) / len(errs):.3f} GiB, worst {max(errs):.3f} GiB"
    )
    for key, title in (
        ("gpu", "leave-one-GPU-out"),
        ("class", "leave-one-GPU-class-out"),
        ("version", "leave-one-version-out"),
    ):
        lines.append(f"{title}:")
        for group, mean, worst in leave_out(rows, key):
            lines.append(f"  {group:<22} mean |error| {mean:.3f} GiB, worst {worst:.3f} GiB")
    return lines


# --- non-torch memory on one GPU: the versions.toml base, left out by GPU -----------------------


def non_torch_rows(results: list[Result]) -> list[dict[str, Any]]:
    """Single-GPU vLLM cases with a logged non-torch growth in the version's "increase" scope:
    there the bill's non-torch line is the fitted base alone (versions.toml non_torch_base_gib)."""
    rows = []
    for r in results:
        logged = r.case.logged.get("non_torch_gib")
        if logged is None or r.bill is None or r.case.engine != "vllm":
            continue
        item = r.bill.item("non_torch")
        launch = r.bill.launch
        if item.inputs["scope"] != "increase" or launch.tp * launch.pp != 1:
            continue
        rows.append(
            {
                "gpu": r.case.gpu,
                "class": gpu_class(r.case.gpu),
                "version": version_group(r),
                "logged": logged,
                "predicted": item.bytes / GIB,
            }
        )
    return rows


def non_torch_report(results: list[Result]) -> list[str]:
    """The base's error as it stands, and refitted without each group: a shift (the median of
    logged − predicted over the other groups) added to the versioned base, then the left-out
    group predicted."""
    rows = non_torch_rows(results)
    errs = [abs(r["predicted"] - r["logged"]) for r in rows]
    lines = [
        f"non-torch cases (one GPU, increase scope): {len(rows)}; versions.toml base as is:"
        f" mean |error| {statistics.fmean(errs):.3f} GiB, worst {max(errs):.3f}"
    ]
    for key in ("gpu", "class", "version"):
        for group in sorted({r[key] for r in rows}):
            train = [r for r in rows if r[key] != group]
            test = [r for r in rows if r[key] == group]
            if not train:
                continue
            shift = statistics.median(r["logged"] - r["predicted"] for r in train)
            e = [abs(r["predicted"] + shift - r["logged"]) for r in test]
            lines.append(
                f"  leave-one-{key}-out {group:<18} shift {shift:+.3f} GiB, mean |error|"
                f" {statistics.fmean(e):.3f} GiB, worst {max(e):.3f} ({len(test)} cases)"
            )
    return lines


# --- CUDA-graph memory: why it stays one constant ----------------------------------------------


def graph_rows(results: list[Result]) -> list[dict[str, Any]]:
    """Cases whose log shows "Graph capturing finished ..., took X GiB" (inputs known)."""
    rows = []
    for r in results:
        g = r.case.logged.get("cudagraph_gib")
        if g is None or r.bill is None or r.case.engine != "vllm" or not r.case.inputs_known:
            continue
        launch = r.bill.launch
        rows.append(
            {
                "case": r.case.case_id,
                "gpu": r.case.gpu,
                "class": gpu_class(r.case.gpu),
                "version": version_group(r),
                "logged": g,
                "layers": launch.arch.num_layers / launch.pp,
            }
        )
    return rows


def _graph_fit(rows: list[dict[str, Any]], per_layer: bool) -> tuple[float, float]:
    """(a, b) of logged ≈ a + b × layers on the stage (b = 0: the median, the constant)."""
    if not per_layer:
        return statistics.median(r["logged"] for r in rows), 0.0
    xs = [r["layers"] for r in rows]
    ys = [r["logged"] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def graph_report(results: list[Result]) -> list[str]:
    rows = graph_rows(results)
    rules = rules_at("0.19.0")
    lines = [
        f"CUDA-graph cases: {len(rows)} (versions.toml cudagraph_gib: {rules['cudagraph_gib']} GiB)"
    ]
    for per_layer, title in ((False, "constant (median)"), (True, "a + b × layers")):
        a, b = _graph_fit(rows, per_layer)
        errs = [abs(a + b * r["layers"] - r["logged"]) for r in rows]
        lines.append(
            f"{title}: a {a:.3f} GiB, b {b:.4f} GiB/layer; in-sample mean |error|"
            f" {statistics.fmean(errs):.3f} GiB, worst {max(errs):.3f}"
        )
        for key in ("gpu", "class", "version"):
            for group in sorted({r[key] for r in rows}):
                train = [r for r in rows if r[key] != group]
                test = [r for r in rows if r[key] == group]
                a, b = _graph_fit(train, per_layer)
                e = [abs(a + b * r["layers"] - r["logged"]) for r in test]
                lines.append(
                    f"  leave-one-{key}-out {group:<18} mean |error| {statistics.fmean(e):.3f} GiB,"
                    f" worst {max(e):.3f} ({len(test)} cases)"
                )
    return lines


# --- llama.cpp load logs: KV cells, KV buffer per device, compute buffers ----------------------


def cpp_class(record: dict[str, Any]) -> str:
    """gpu_class for catalog GPUs (a log naming a PCIe card of an SXM catalog entry, such as
    V100-PCIE, is PCIe datacenter); a GPU outside the catalog by its name (rtx: consumer,
    radeon/rx: AMD)."""
    gpu = record["gpu"]
    try:
        cls = gpu_class(gpu)
    except Exception:
        return "AMD" if gpu.startswith(("radeon", "rx-", "mi")) else "workstation/consumer"
    return "PCIe datacenter" if cls == "SXM" and "PCIE" in record["gpu_model"].upper() else cls


def _mib_map(table: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:,.2f}" for k, v in sorted(table.items())) or "-"


def cpp_table(results: list[LlamaCppResult], markdown: bool) -> list[str]:
    head = (
        "case",
        "GPU",
        "build",
        "cells (logged)",
        "KV MiB predicted",
        "KV logged",
        "compute err",
    )
    rows = []
    for r in results:
        rec = r.record
        errs = ", ".join(f"{k} {v:+.1%}" for k, v in sorted(r.compute_errors().items()))
        rows.append(
            (
                rec["case_id"],
                rec["gpu"],
                str(rec.get("build") or "?"),
                f"{r.cells:,} ({r.cells_logged or '?':,})" if r.cells_logged else f"{r.cells:,}",
                _mib_map(r.kv),
                _mib_map(r.kv_logged) + ("" if r.kv_exact else "  MISS"),
                errs or "-",
            )
        )
    if markdown:
        return [
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
            *("| " + " | ".join(row) + " |" for row in rows),
        ]
    return ["  ".join(head), *("  ".join(row) for row in rows)]


def cpp_counts(results: list[LlamaCppResult]) -> dict[str, tuple[int, int]]:
    """(passing, counted): KV cells equal, KV buffer per device exact, compute buffer (every
    device the log prints, GPU and host) within 10 %."""
    cells = [r.cells == r.cells_logged for r in results if r.cells_logged]
    kv = [r.kv_exact for r in results if r.kv_logged]
    gpu_compute = [
        abs(e) <= 0.10 for r in results for k, e in r.compute_errors().items() if k != "host"
    ]
    host_compute = [
        abs(e) <= 0.10 for r in results for k, e in r.compute_errors().items() if k == "host"
    ]
    fails = [r.predicted_fail for r in results if r.failed]
    alarms = [r.predicted_fail for r in results if not r.failed]
    return {
        "failed_starts": (sum(fails), len(fails)),
        "false_alarms": (sum(alarms), len(alarms)),
        "cells": (sum(cells), len(cells)),
        "kv": (sum(kv), len(kv)),
        "compute_gpu": (sum(gpu_compute), len(gpu_compute)),
        "compute_host": (sum(host_compute), len(host_compute)),
    }


def cpp_summary(results: list[LlamaCppResult]) -> list[str]:
    c = cpp_counts(results)
    gpus = sorted({r.record["gpu"] for r in results})
    lines = [
        f"llama.cpp logs: {len(results)} ({len(gpus)} GPU types: {', '.join(gpus)})",
        f"llama.cpp KV cells as logged: {_frac(c['cells'])}",
        f"llama.cpp KV buffer on every device exact (0.01 MiB): {_frac(c['kv'])}",
        f"llama.cpp GPU compute buffer within 10 %: {_frac(c['compute_gpu'])}",
        f"llama.cpp host compute buffer within 10 %: {_frac(c['compute_host'])}",
        f"llama.cpp failed starts predicted (KV + compute alone over the GPU): {_frac(c['failed_starts'])}",
        f"llama.cpp false alarms (started, KV + compute alone over the GPU): {_frac(c['false_alarms'])}",
        "llama.cpp by GPU class (KV exact | GPU compute within 10 %):",
    ]
    for cls in GPU_CLASSES:
        sub = [r for r in results if cpp_class(r.record) == cls]
        s = cpp_counts(sub)
        lines.append(f"  {cls:<21} {_frac(s['kv'])} | {_frac(s['compute_gpu'])}")
    return lines


# --- TensorRT-LLM engine-backend logs: the pool from the free memory the runtime logged ---------


def trt_lines(results: list[Any]) -> list[str]:
    """Each TensorRT-engine log: blocks from the logged free memory (trtllm/bill.py
    engine_kv_blocks) against the logged blocks, and the KV bytes per token against the
    logged pool."""
    lines = ["TensorRT-LLM engine logs (blocks from the logged free memory; KV bytes per token):"]
    for r in results:
        lg = r.record["logged"]
        blocks = "-" if r.blocks is None else f"{r.blocks[0]:,}–{r.blocks[1]:,}"
        per = f"{r.per_token:,} B/token ({'config.json' if r.per_token_from_config else 'from the log'})"
        err = "" if r.kv_bytes_error is None else f", KV bytes {r.kv_bytes_error:+.2%}"
        lines.append(
            f"  {r.record['case_id'][:56]:<56} blocks {blocks} (logged {lg.get('num_blocks', '-')})"
            f" {_mark(r.blocks_ok)}; {per}{err}{_trt_start(r)}"
        )
    ok = [r.blocks_ok for r in results if r.blocks_ok is not None]
    kv = [abs(r.kv_bytes_error) <= 0.005 for r in results if r.kv_bytes_error is not None]
    fails = [r.predicted_fail for r in results if r.failed]
    alarms = sum(r.predicted_fail for r in results if not r.failed)
    lines.append(
        f"TensorRT-LLM engine: blocks as logged {_frac((sum(ok), len(ok)))}; KV bytes per token"
        f" within 0.5 % {_frac((sum(kv), len(kv)))}; failed starts predicted"
        f" {_frac((sum(fails), len(fails)))}, false alarms {alarms}"
        " (headroom after the pool against the cuBLAS workspace, trtllm/engine_start.py)"
    )
    return lines


def _trt_start(r: Any) -> str:
    """The headroom the pool leaves (MiB, over the printed range) against the floor."""
    if r.start is None:
        return ""
    low, high = sorted(s.headroom / 2**20 for s in r.start)
    verdict = "fails" if r.predicted_fail else "starts"
    logged = "failed" if r.failed else "started"
    return (
        f"; headroom {low:,.1f}–{high:,.1f} MiB vs {r.start[0].needed / 2**20:.0f} MiB:"
        f" {verdict} ({logged}) {_mark(r.predicted_fail == r.failed)}"
    )


def corpus_line(
    results: list[Result], cpp: list[LlamaCppResult], trt: list[Any] | None = None
) -> str:
    trt = trt or []
    gpus = {r.case.gpu for r in results} | {r.record["gpu"] for r in cpp}
    gpus |= {r.record["gpu"] for r in trt}
    engines: dict[str, int] = defaultdict(int)
    for r in results:
        engines[r.case.engine] += 1
    engines["llamacpp"] += len(cpp)
    engines["trtllm"] += len(trt)
    parts = ", ".join(f"{k} {v}" for k, v in sorted(engines.items()))
    return f"corpus: {len(results) + len(cpp)} logs on {len(gpus)} GPU types ({parts})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--fit", action="store_true")
    p.add_argument("--logo", action="store_true", help="bench/engine_logo.py's report")
    opts = p.parse_args(argv)
    if opts.logo:
        return engine_logo.main(["--markdown"] if opts.markdown else [])
    results = [predict(c) for c in load_cases(ALL_LOG_FILES)]
    if opts.fit:
        print("\n".join(fit_report(results)))
        print("\n".join(graph_report(results)))
        print("\n".join(non_torch_report(results)))
        return 0
    cpp = [predict_llamacpp(r) for r in llamacpp_records()]
    bullet = "- " if opts.markdown else ""
    print("\n".join(table(results, opts.markdown)))
    print()
    print("\n".join(bullet + s for s in summary(results)))
    print()
    print("\n".join(cpp_table(cpp, opts.markdown)))
    print()
    print("\n".join(bullet + s for s in cpp_summary(cpp)))
    trt = [predict_trtllm_engine(r) for r in trtllm_records()]
    print()
    print("\n".join(bullet + s for s in trt_lines(trt)))
    print(bullet + corpus_line(results, cpp, trt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
