"""How close gpuplan's operator-level training step time comes to published measurements.

    python bench/training_speed_accuracy.py          # leave-one-source-out errors
    python bench/training_speed_accuracy.py --fit    # also the full-set fit for train_speed.toml

Each measurement in tests/data/training_speed/measurements.toml (Megatron-LM papers, llm-foundry,
torchtitan; exact setups and sources there) is turned into tokens/s per GPU with its source's own
formula and predicted with `gpuplan.engine.train_speed.operator_step` from the model's shape, the
GPU, the layout, the micro-batching and recompute. The fitted figures of
src/gpuplan/engine/train_speed.toml (GEMM efficiency per family, elementwise traffic eager/fused)
are refitted without the source being predicted: LEAVE-ONE-SOURCE-OUT. Prints each figure's error,
the median |error| per source and overall.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.catalog.gpus import list_gpus  # noqa: E402
from gpuplan.engine.cost import (  # noqa: E402
    CommBytes,
    dp_comm_bytes,
    pp_comm_bytes,
    tp_comm_bytes,
)
from gpuplan.engine.frozen import replace as frozen_replace  # noqa: E402
from gpuplan.engine.train_speed import (  # noqa: E402
    SpeedGpu,
    SpeedLayout,
    SpeedModel,
    efficiencies,
    gpu_family,
    operator_step,
)

DATA = ROOT / "tests" / "data" / "training_speed" / "measurements.toml"
FITTED = (
    "gemm_ampere",
    "gemm_hopper",
    "gemm_fp8_hopper",
    "elementwise_eager",
    "elementwise_fused",
    "elementwise_compiled",
)


@dataclass(frozen=True)
class Case:
    label: str
    source: str
    family: str
    attention: str
    model: SpeedModel
    layout: SpeedLayout
    gpu: SpeedGpu
    params: int  # all parameters (the optimizer's and FSDP's Ψ)
    measured: float  # tokens/s per GPU
    kv_width: int  # key/value heads × head dim (context parallelism's ring)


def _kv_width(m: dict) -> int:
    return m.get("kv_heads", m["heads"]) * (m["hidden"] // m["heads"])


def _shape(m: dict) -> tuple[SpeedModel, int]:
    h, layers, heads = m["hidden"], m["layers"], m["heads"]
    q = h // heads
    kv = m.get("kv_heads", heads) * q
    mlp = (3 if m["gated"] else 2) * h * m["ffn"]
    per_layer = 2 * h * h + 2 * h * kv + mlp
    n = layers * per_layer + h * m["vocab"]  # matmuls: the layers and the LM head
    total = n + h * m["vocab"] * (0 if m.get("tied", False) else 1)
    head = h * m["vocab"]
    widths = [(h, h), (kv, h), (kv, h), (h, h)]
    widths += [(m["ffn"], h)] * (2 if m["gated"] else 1) + [(h, m["ffn"]), (m["vocab"], h)]
    model = SpeedModel(
        n, layers, h, heads * q, layers, heads, head_params=head, widths=tuple(widths)
    )
    return model, total


def _tokens_per_gpu(meas: dict, shape: dict) -> float:
    """The source's figure as tokens/s per GPU, by the source's own FLOPs formula."""
    v, kind = meas["value"], meas["metric"]
    if kind == "tokens_per_s_per_gpu":
        return float(v)
    s, h, layers, vocab = meas["seq"], shape["hidden"], shape["layers"], shape["vocab"]
    if kind == "megatron_hw_tflops":  # Narayanan et al. 2021 §5.1
        per_token = 96 * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
        return v * 1e12 / per_token
    if kind == "korthikanti_mfu":  # Korthikanti et al. 2022 §6, of 312 TFLOP/s
        per_token = 72 * layers * h * h * (1 + s / (6 * h) + vocab / (12 * layers * h))
        return v * 312e12 / per_token
    raise ValueError(f"unknown metric {kind!r}")


def _layout(meas: dict, node: int) -> SpeedLayout:
    tp, pp, cp = meas.get("tp", 1), meas.get("pp", 1), meas.get("cp", 1)
    dp = meas["gpus"] // (tp * pp * cp)
    mb = meas.get("micro_batch", 1)
    m = meas.get("micro_batches") or meas["global_batch"] // (dp * mb)
    rec = meas["recompute"]
    share = 0.5 if rec == "every:2" else 1.0
    return SpeedLayout(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        vpp=meas.get("vpp", 1),
        zero=meas.get("zero", 0),
        sp=meas.get("sp", False),
        micro_batch=mb,
        micro_batches=m,
        seq=meas["seq"],
        recompute=rec,
        checkpointed_share=share,
        eager_attention=meas["attention"] == "eager",
        kernels=meas.get("kernels", "eager"),
        fp8=meas.get("fp8", ""),
        gpus_per_node=node,
    )


def load_cases() -> list[Case]:
    data = tomllib.loads(DATA.read_text("utf-8"))
    gpus = {g.id: g for g in list_gpus()}
    cases = []
    for i, meas in enumerate(data["measurement"]):
        shape = data["models"][meas["model"]]
        model, total = _shape(shape)
        spec = gpus[meas["gpu"]]
        scale = meas.get("peak_scale", 1.0)
        gpu = SpeedGpu(
            peak_flops=spec.bf16_dense_tflops * 1e12 * scale,
            hbm_bytes_per_s=meas.get("hbm_bytes_per_s", spec.memory_bandwidth_bytes_per_s),
            intra_bytes_per_s=spec.interconnect_bytes_per_s_per_dir,
            network_bytes_per_s=meas.get("network_bytes_per_s", 50e9),
            fp8_peak_flops=(spec.fp8_dense_tflops or 0.0) * 1e12 * scale,
        )
        layout = _layout(meas, spec.gpus_per_node)
        label = f"{meas['source']}:{meas['model']} {meas['gpu']}×{meas['gpus']} s{meas['seq']}"
        label += f" {meas['recompute']}{'' if layout.kernels == 'eager' else ' ' + layout.kernels}"
        label += f"{' fp8/' + layout.fp8 if layout.fp8 else ''} #{i}"
        family = gpu_family(spec.compute_capability, spec.vendor) or "hopper"
        measured = _tokens_per_gpu(meas, shape)
        cases.append(
            Case(
                label,
                meas["source"],
                family,
                meas["attention"],
                model,
                layout,
                gpu,
                total,
                measured,
                _kv_width(shape),
            )
        )
    return cases


def predict(case: Case, fit: dict[str, float]) -> float:
    """Tokens/s per GPU of one case at the efficiencies `fit` (FITTED's names)."""
    torchao = case.layout.fp8 == "torchao"
    e = efficiencies(
        case.family,
        case.attention,
        case.layout.fp8 or "te",
        gemm=fit.get(f"gemm_{case.family}", fit["gemm_hopper"]),
        **({"gemm_fp8": fit["gemm_fp8_hopper"]} if torchao else {}),
        elementwise_eager=fit["elementwise_eager"],
        elementwise_fused=fit["elementwise_fused"],
        elementwise_compiled=fit["elementwise_compiled"],
    )
    lo, m = case.layout, case.model
    tokens_mb = lo.micro_batch * lo.seq / lo.cp
    shard = lo.dp * lo.cp
    psi = case.params / (lo.tp * lo.pp)
    sharded = dp_comm_bytes(int(psi), 2, 2, lo.zero, shard, 1, lo.micro_batches)
    comm = CommBytes(
        dp=sharded,
        tp=tp_comm_bytes(
            lo.tp,
            2,
            int(tokens_mb),
            m.hidden,
            m.layers // lo.pp,
            lo.micro_batches,
            "full" if lo.recompute == "full" else "none",
        ),
        pp=pp_comm_bytes(
            lo.pp, 2, int(tokens_mb), m.hidden, lo.micro_batches, lo.tp if lo.sp else 1, lo.vpp
        ),
    )
    if lo.cp > 1:  # Liu et al. 2023: K and V around the ring, 3·(cp − 1) chunks per layer
        kv = 2 * case.kv_width / lo.tp * tokens_mb * 2
        comm = frozen_replace(comm, cp=3 * (lo.cp - 1) * kv * m.layers / lo.pp * lo.micro_batches)
    local = psi / (shard if lo.zero >= 1 else 1)
    step = operator_step(m, lo, case.gpu, e, comm, sharded, local).step_s
    tokens = lo.micro_batch * lo.seq * lo.micro_batches * lo.dp
    return tokens / step / lo.gpus


def error(case: Case, fit: dict[str, float]) -> float:
    return predict(case, fit) / case.measured - 1


def table_fit() -> dict[str, float]:
    e_a = efficiencies("ampere")
    return {
        "gemm_ampere": e_a.gemm,
        "gemm_hopper": efficiencies("hopper").gemm,
        "gemm_fp8_hopper": efficiencies("hopper", fp8_stack="torchao").gemm_fp8,
        "elementwise_eager": e_a.elementwise_eager,
        "elementwise_fused": e_a.elementwise_fused,
        "elementwise_compiled": e_a.elementwise_compiled,
    }


# Where every fit starts (LOSO folds and the full set alike), so a fold's figures do not depend
# on the table's: mid-range efficiencies and traffic multipliers.
START = {
    "gemm_ampere": 0.7,
    "gemm_hopper": 0.7,
    "gemm_fp8_hopper": 0.5,
    "elementwise_eager": 3.0,
    "elementwise_fused": 3.0,
    "elementwise_compiled": 3.0,
}


def _loss(cases: list[Case], fit: dict[str, float]) -> float:
    return sum(math.log1p(error(c, fit)) ** 2 for c in cases)


def fit_globally(cases: list[Case], start: dict[str, float]) -> dict[str, float]:
    """Coordinate descent on the squared log errors, each figure kept in a physical range
    (efficiencies within (0.2, 1], traffic multipliers within [0, 6])."""
    fit = dict(start)
    bounds = {k: (0.2, 1.0) for k in FITTED if k.startswith("gemm")}
    step = {k: 0.08 for k in FITTED}
    best = _loss(cases, fit)
    for _ in range(400):
        improved = False
        for k in FITTED:
            lo, hi = bounds.get(k, (0.0, 6.0))
            for sign in (1, -1):
                trial = dict(fit, **{k: min(hi, max(lo, fit[k] * (1 + sign * step[k])))})
                loss = _loss(cases, trial)
                if loss < best - 1e-12:
                    fit, best, improved = trial, loss, True
                    break
        if not improved:
            step = {k: v / 2 for k, v in step.items()}
            if max(step.values()) < 1e-4:
                break
    return fit


def loso_errors(cases: list[Case]) -> dict[str, float]:
    """Each case's error with the fitted figures refitted without its source."""
    out: dict[str, float] = {}
    start = START
    for source in sorted({c.source for c in cases}):
        rest = [c for c in cases if c.source != source]
        fit = fit_globally(rest, start)
        for c in cases:
            if c.source == source:
                out[c.label] = error(c, fit)
    return out


def summary(cases: list[Case], errs: dict[str, float]) -> dict[str, float]:
    by_source: dict[str, list[float]] = {}
    for c in cases:
        by_source.setdefault(c.source, []).append(abs(errs[c.label]))
    out = {s: statistics.median(v) for s, v in by_source.items()}
    out["all"] = statistics.median(abs(v) for v in errs.values())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="also print the full-set fit")
    args = parser.parse_args()
    cases = load_cases()
    errs = loso_errors(cases)
    print(f"{'measurement':64} {'measured':>10} {'LOSO err':>9}")
    for c in cases:
        print(f"{c.label:64} {c.measured:10,.0f} {errs[c.label]:+9.1%}")
    summ = summary(cases, errs)
    within = sum(abs(v) <= 0.10 for v in errs.values())
    print(f"\n{len(cases)} measurements from {len(summ) - 1} sources, leave-one-source-out:")
    for source, med in summ.items():
        if source != "all":
            print(f"  {source:18} median |error| {med:6.1%}")
    print(f"  {'all':18} median |error| {summ['all']:6.1%}, {within}/{len(cases)} within 10 %")
    if args.fit:
        full = fit_globally(cases, START)
        print("\nfull-set fit (train_speed.toml):")
        for k, v in full.items():
            print(f"  {k} = {v:.3f}")
        table = {c.label: error(c, table_fit()) for c in cases}
        print(
            f"  in-sample median |error| at the table's figures: {summary(cases, table)['all']:.1%}"
        )


if __name__ == "__main__":
    main()
