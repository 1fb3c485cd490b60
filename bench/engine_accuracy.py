"""Accuracy of gpuplan's vLLM profile against real vLLM 0.19.0 startup logs.

    PYTHONPATH=src python3 bench/engine_accuracy.py            # the per-case table + summary
    PYTHONPATH=src python3 bench/engine_accuracy.py --markdown # the same, as the README table
    PYTHONPATH=src python3 bench/engine_accuracy.py --fit      # refit the activation model (+ LOO)

Each case of tests/data/engine_logs/vllm-0.19-h100.json is predicted from its own log excerpt
(launch arguments from the "non-default args" line, GPU total from the log) and the model's
config.json in tests/data/engine_configs/. A failed start counts as correct when gpuplan also
predicts a failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.api import check_log  # noqa: E402
from gpuplan.catalog.engine_logs import parse_log  # noqa: E402
from gpuplan.engine.profiles.vllm import profile_run as vllm_profile  # noqa: E402

LOGS = ROOT / "tests" / "data" / "engine_logs" / "vllm-0.19-h100.json"
CONFIGS = ROOT / "tests" / "data" / "engine_configs"
GIB = 2**30


def load_cases(path: Path = LOGS) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["cases"])


def config_for(model_id: str) -> dict[str, Any]:
    want = model_id.replace("/", "--").lower() + ".json"
    for p in CONFIGS.glob("*.json"):
        if p.name.lower() == want:
            return dict(json.loads(p.read_text()))
    raise FileNotFoundError(f"no config for {model_id} in {CONFIGS}")


def predict(case: dict[str, Any]) -> dict[str, Any]:
    """gpuplan's prediction for one case, with the logged figures beside it."""
    log = parse_log(case["verbatim_excerpt"])
    report = check_log(log, config_for(case["model_id"]), name=case["model_id"])
    assert report.plan is not None
    bill = report.plan.bill
    w_pred = bill.item("weights").bytes / GIB
    logged_fail = case["kv_cache_gib"] is not None and case["kv_cache_gib"] <= 0
    tokens = case["kv_cache_tokens"]
    kv_err = None if not tokens else bill.kv_capacity_tokens / tokens - 1
    return {
        "case": case,
        "weights_logged": case["weights_gib"],
        "weights_pred": w_pred,
        "weights_err": w_pred / case["weights_gib"] - 1,
        "act_logged": case["activation_peak_gib"],
        "act_pred": bill.item("activation_peak").bytes / GIB,
        "tokens_logged": tokens,
        "tokens_pred": bill.kv_capacity_tokens,
        "tokens_err": kv_err,
        "tokens_ok": (not bill.fits)
        if logged_fail
        else (kv_err is not None and abs(kv_err) <= 0.10),
        "weights_ok": abs(w_pred / case["weights_gib"] - 1) <= 0.02,
        "fits": bill.fits,
        "bill": bill,
    }


def layout(case: dict[str, Any]) -> str:
    return f"TP{case['tensor_parallel_size']} PP{case['pipeline_parallel_size']}"


def tags(case: dict[str, Any]) -> str:
    out = []
    if case.get("quantization"):
        out.append(str(case["quantization"]))
    if case.get("kv_cache_dtype") not in (None, "auto"):
        out.append(f"kv {case['kv_cache_dtype']}")
    if case.get("dtype") == "float32":
        out.append("fp32")
    return ", ".join(out)


def table(rows: list[dict[str, Any]], markdown: bool) -> list[str]:
    lines = []
    head = (
        "| model | GPU | layout | max len | weights logged / predicted GiB | err | "
        "KV tokens logged / predicted | err |"
    )
    if markdown:
        lines += [head, "|---|---|---|---:|---:|---:|---:|---:|"]
    else:
        lines.append(
            f"{'model':<52} {'layout':<8} {'len':>6} {'W log':>7} {'W pred':>7} {'err':>6}"
            f" {'KV log':>9} {'KV pred':>9} {'err':>7}"
        )
    for r in rows:
        c = r["case"]
        model = c["model_id"] + (f" ({tags(c)})" if tags(c) else "")
        kv_err = "" if r["tokens_err"] is None else f"{r['tokens_err'] * 100:+.1f}%"
        if markdown:
            lines.append(
                f"| {model} | H100 | {layout(c)} | {c['max_model_len']:,} |"
                f" {r['weights_logged']:.2f} / {r['weights_pred']:.2f} | {r['weights_err'] * 100:+.1f}% |"
                f" {r['tokens_logged']:,} / {r['tokens_pred']:,} | {kv_err} |"
            )
        else:
            lines.append(
                f"{model[:52]:<52} {layout(c):<8} {c['max_model_len']:>6} {r['weights_logged']:>7.2f}"
                f" {r['weights_pred']:>7.2f} {r['weights_err'] * 100:>+5.1f}% {r['tokens_logged']:>9,}"
                f" {r['tokens_pred']:>9,} {kv_err:>7}"
            )
    return lines


def summary(rows: list[dict[str, Any]]) -> list[str]:
    n = len(rows)
    w = sum(r["weights_ok"] for r in rows)
    k = sum(r["tokens_ok"] for r in rows)
    act = [abs(r["act_pred"] - r["act_logged"]) for r in rows if r["act_logged"] is not None]
    kv_errs = sorted(abs(r["tokens_err"]) for r in rows if r["tokens_err"] is not None)
    return [
        f"cases: {n} (vLLM 0.19.0, H100 80GB, TP 1-4, PP 1-4)",
        f"weights within 2 %: {w}/{n} ({w / n:.0%})",
        f"KV-cache tokens within 10 %: {k}/{n} ({k / n:.0%})",
        f"KV-cache tokens, median |error|: {kv_errs[len(kv_errs) // 2] * 100:.1f} %,"
        f" worst {kv_errs[-1] * 100:.1f} %",
        f"activation peak, mean |error|: {sum(act) / len(act):.2f} GiB, worst {max(act):.2f} GiB",
    ]


# --- the activation-model fit ------------------------------------------------------------

FEATURES = ("const", "logits", "mlp", "moe", "hidden", "encoder")


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a small dense system)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if abs(m[col][col]) < 1e-18:
            continue
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] if abs(m[i][i]) > 1e-18 else 0.0 for i in range(n)]


def least_squares(x: list[list[float]], y: list[float], ridge: float = 1e-6) -> list[float]:
    k = len(x[0])
    ata = [
        [sum(r[i] * r[j] for r in x) + (ridge if i == j else 0) for j in range(k)] for i in range(k)
    ]
    aty = [sum(r[i] * yy for r, yy in zip(x, y, strict=True)) for i in range(k)]
    return _solve(ata, aty)


def fit(cases: list[dict[str, Any]]) -> None:
    """Fit the torch-peak model on every logged activation peak; print coefficients and LOO."""
    xs, ys, names = [], [], []
    for case in cases:
        if case["pipeline_parallel_size"] > 1:
            continue  # rank 0 of a pipeline runs no sampler: the forward model, not this fit
        r = predict(case)
        feats = r["bill"].item("activation_peak").inputs
        row = [1.0] + [feats.get(f"{f}_bytes", 0) / GIB for f in FEATURES[1:]]
        xs.append(row)
        ys.append(case["activation_peak_gib"])
        names.append(f"{case['model_id']} {layout(case)}")
    coef = least_squares(xs, ys)
    print("coefficients (GiB const, then per byte of each feature):")
    for f, c in zip(FEATURES, coef, strict=True):
        print(f"  {f:<8} {c:+.4f}")
    loo = []
    for i in range(len(xs)):
        c = least_squares(xs[:i] + xs[i + 1 :], ys[:i] + ys[i + 1 :])
        pred = sum(a * b for a, b in zip(c, xs[i], strict=True))
        loo.append(pred - ys[i])
    fitted = [
        sum(a * b for a, b in zip(coef, x, strict=True)) - y for x, y in zip(xs, ys, strict=True)
    ]
    print(
        f"in-sample mean |residual| {sum(map(abs, fitted)) / len(fitted):.3f} GiB, worst {max(map(abs, fitted)):.3f}"
    )
    print(
        f"leave-one-out mean |error| {sum(map(abs, loo)) / len(loo):.3f} GiB, worst {max(map(abs, loo)):.3f}"
    )
    for n, e in sorted(zip(names, loo, strict=True), key=lambda t: -abs(t[1]))[:6]:
        print(f"  LOO {e:+.2f} GiB  {n}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--fit", action="store_true")
    opts = p.parse_args(argv)
    cases = load_cases()
    if opts.fit:
        fit(cases)
        return 0
    rows = [predict(c) for c in cases]
    print("\n".join(table(rows, opts.markdown)))
    print()
    print("\n".join(("- " if opts.markdown else "") + s for s in summary(rows)))
    print(f"\nvLLM profile: activation model c0={vllm_profile.ACT_C0 / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
