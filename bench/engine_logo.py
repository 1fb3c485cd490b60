"""Leave-one-GPU-out errors of every fitted term of the serving-memory model (issue 20).

    PYTHONPATH=src python3 bench/engine_logo.py             # each term: per GPU, in-sample vs LOGO
    PYTHONPATH=src python3 bench/engine_logo.py --markdown  # the README table
    PYTHONPATH=src python3 bench/engine_accuracy.py --logo  # the same as the first

A fitted term is a constant read from startup logs rather than from the engine's source
(TERMS below names each, where it lives and the logs it came from). For each one this bench
takes the value every log implies with the rest of the bill as shipped (the logged figure the
term drives, minus the bill's other terms), refits the term by the rule its source states — the
median of the log-implied values — once on every log (in sample) and once without each GPU type
in turn (leave-one-GPU-out, LOGO), and predicts the left-out GPU's logs with it. Errors are on
what the term drives:

    figure    the logged non-KV figure the term is part of (activation peak, non-torch memory,
              CUDA-graph pool, CUDA total, SGLang's memory in use before the weights): mean
              |predicted − logged| in GiB
    KV        KV tokens end to end (V0: GPU blocks): the case's predicted KV memory moved by what
              the refit adds to or takes from the non-KV lines (× the utilisation for the total,
              × mem_fraction_static for SGLang), tokens scaled with it; cases within 10 %

A GPU type whose logs show the figure only drives the LOGO fit of the others; one that has no
such log is still predicted (its KV tokens). A term fitted on one GPU type has no LOGO figure:
that is said, not hidden. Cases: every tests/data/engine_logs/*.json the engine-log loader
reads (tests/engine_cases.py), plus any new public-logs-*.json file beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from engine_cases import DATA, LLAMACPP_FILE, LOG_FILES, Result, load_cases, predict  # noqa: E402
from gpuplan.catalog import get_gpu  # noqa: E402
from gpuplan.engine.profiles.common import (  # noqa: E402
    CUDA_RESERVED_BYTES,
    cuda_total_bytes,
    padded_vocab,
)
from gpuplan.engine.profiles.sglang.bill import RULES as SGLANG_RULES  # noqa: E402
from gpuplan.engine.profiles.vllm.non_torch import interconnect_class  # noqa: E402
from gpuplan.engine.profiles.vllm.profile_run import (  # noqa: E402
    ProfileBatch,
    peak_terms,
    v0_peak_terms,
)
from gpuplan.engine.profiles.vllm.rules import rules_at, rules_for  # noqa: E402

GIB = 2**30


def log_files() -> tuple[str, ...]:
    """The loader's files, and any other engine-log file beside them (a new public-logs-N.json
    is read without editing a list); llama.cpp's load logs have their own schema."""
    extra = sorted(
        p.name
        for p in (DATA / "engine_logs").glob("*.json")
        if p.name not in LOG_FILES and p.name != LLAMACPP_FILE
    )
    return (*LOG_FILES, *extra)


def load_results(files: tuple[str, ...] | None = None) -> list[Result]:
    return [predict(c) for c in load_cases(files or log_files())]


@dataclass(frozen=True)
class Row:
    """One log as a fitted term sees it."""

    case: str
    gpu: str
    implied: float | None  # the term's value this log implies (the bill's other terms as shipped)
    logged: float | None  # the logged figure the term drives, GiB
    figure: Callable[[float], float]  # that figure predicted with the term at a value, GiB
    used: float  # the figure the shipped bill used, GiB
    kv_coef: float  # KV bytes lost per byte the figure grows
    tokens: int  # predicted KV tokens (V0: blocks)
    tokens_logged: int | None
    available: int  # the predicted KV memory, bytes

    def tokens_at(self, value: float) -> float:
        shift = self.kv_coef * (self.figure(value) - self.used) * GIB
        return self.tokens * max(0.0, self.available - shift) / self.available


@dataclass(frozen=True)
class Term:
    """A fitted constant: where it lives, what it was fitted from, and its rows."""

    name: str
    where: str
    shipped: float
    unit: str
    source: str
    rows: Callable[[list[Result]], list[Row]]
    kind: str = "fitted"  # fitted | derived (a mechanism explains it; checked, not refitted)


def fit(values: list[float]) -> float:
    """The fitting rule: the median of the log-implied values."""
    return statistics.median(values)


# --- the rows each term sees -------------------------------------------------------------------


def _kv(r: Result) -> tuple[int, int | None, int]:
    """(predicted tokens, logged tokens, predicted KV memory) of a case that started and whose
    inputs are known; logged None when it cannot be compared."""
    bill, lg, c = r.bill, r.case.logged, r.case
    if c.engine == "sglang" or lg.get("kv_cache_tokens"):
        pred, logged = bill.kv_capacity_tokens, lg.get("kv_cache_tokens")
    else:
        pred, logged = bill.num_blocks, lg.get("gpu_blocks")
    if c.failed or not c.inputs_known or not bill.fits or pred <= 0 or bill.kv_cache_bytes <= 0:
        logged = None
    return pred, (int(logged) if logged else None), max(1, bill.kv_cache_bytes)


def _row(
    r: Result,
    implied: float | None,
    logged: float | None,
    figure: Callable[[float], float],
    used: float,
    kv_coef: float = 1.0,
    drives_kv: bool = True,
) -> Row:
    """A case's row; a log whose inputs had to be assumed implies nothing (it is still
    predicted), and `drives_kv` False: a log that shows the term without the term entering its
    own bill (its KV is not scored)."""
    tokens, tokens_logged, available = _kv(r)
    return Row(
        r.case.case_id,
        r.case.gpu,
        implied if r.case.inputs_known else None,
        logged,
        figure,
        used,
        kv_coef,
        tokens,
        tokens_logged if drives_kv else None,
        available,
    )


def from_kv(row: Row, shipped: float) -> Row:
    """The row with, where it implies nothing else, the value its logged KV size implies: the
    value at which the bill's KV tokens equal the logged ones (bisection; the figure grows with
    the value). For terms whose source is a block or token count."""
    if row.implied is not None or not row.tokens_logged or not row.kv_coef:
        return row
    need = row.available * (1 - row.tokens_logged / row.tokens) / GIB

    def gap(v: float) -> float:
        return row.kv_coef * (row.figure(v) - row.used) - need

    lo, hi = min(0.0, shipped) - 10.0, 10 * abs(shipped) + 10.0
    if gap(lo) > 0 or gap(hi) < 0:
        return row
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return replace(row, implied=(lo + hi) / 2)


def _vllm(results: list[Result]) -> list[tuple[Result, dict[str, Any]]]:
    """vLLM cases with a bill, and the version rules the bill used."""
    return [(r, rules_for(r.bill.launch)) for r in results if r.case.engine == "vllm" and r.bill]


def _act(r: Result) -> dict[str, Any]:
    return dict(r.bill.item("activation_peak").inputs)


def _const(other: float) -> Callable[[float], float]:
    """A figure that is `other` plus the term (GiB)."""
    return lambda v: other + v


def activation_constant(results: list[Result]) -> list[Row]:
    """Profile-run constant c0 (versions.toml activation_constant_gib): every V1 profile peak
    holds it once; implied by 'torch peak memory increase' minus the counted terms. V0 counts
    its eager forward tensor by tensor and holds none (v0.activation_constant_gib 0)."""
    rows = []
    for r, rules in _vllm(results):
        if rules["engine"] != "v1":
            continue
        a, peak = _act(r), r.bill.item("activation_peak").bytes / GIB
        other = peak - a["constant_bytes"] / GIB
        logged = r.case.logged.get("activation_peak_gib")
        implied = None if logged is None else logged - other
        rows.append(_row(r, implied, logged, _const(other), peak))
    return rows


def encoder(results: list[Result]) -> list[Row]:
    """A vision encoder's dummy run in the profile (versions.toml encoder_gib)."""
    rows = []
    for r, _rules in _vllm(results):
        a, peak = _act(r), r.bill.item("activation_peak").bytes / GIB
        if not a["encoder_bytes"]:
            continue
        other = peak - a["encoder_bytes"] / GIB
        logged = r.case.logged.get("activation_peak_gib")
        rows.append(
            _row(r, None if logged is None else logged - other, logged, _const(other), peak)
        )
    return rows


def sampler(
    paths: tuple[str, ...], value: float, kv: bool = False
) -> Callable[[list[Result]], list[Row]]:
    """Bytes per logit element of sampler paths at one shipped value (versions.toml
    sampler_bytes): peak = c0 + encoder + max(forward, rows × vocab × b + hidden + MoE); a log
    implies b only where the sampler moment can be the larger (as bench/engine_accuracy.py
    --fit selects them); `kv`: else the value its KV size implies (a source that was one)."""

    def rows(results: list[Result]) -> list[Row]:
        out = []
        for r, rules in _vllm(results):
            a = _act(r)
            path = a["sampler"]
            if path not in paths or not a["sampler_bytes"]:
                continue
            if float(rules["sampler_bytes"].get(path, -1)) != value:
                continue
            elements = min(a["max_num_seqs"], a["max_num_batched_tokens"]) * padded_vocab(
                r.bill.launch.arch.vocab_size
            )
            fixed = (a["constant_bytes"] + a["encoder_bytes"]) / GIB
            forward = a["forward_bytes"] / GIB
            rest = (a["hidden_bytes"] + a["moe_workspace_bytes"]) / GIB
            n = elements / GIB

            def figure(b: float, r: Result = r, rules: dict[str, Any] = rules) -> float:
                return _peak_at(r, rules, b)

            logged = r.case.logged.get("activation_peak_gib")
            implied = None
            reserved = rules["engine"] == "v0" and rules["non_torch_scope"] == "init_free"
            if logged is not None and not reserved and elements * 4 / GIB > forward:
                b = (logged - fixed - rest) / n
                implied = b if b > 0 else None
            row = _row(r, implied, logged, figure, figure(value))
            out.append(from_kv(row, value) if kv else row)
        return out

    return rows


def _peak_at(r: Result, rules: dict[str, Any], b: float) -> float:
    """The case's activation peak (GiB) with the sampler at `b` bytes per logit element, through
    the function its bill used (profile_run.py peak_terms; V0: v0_peak_terms, whose reserve up
    to 0.6.3 holds the sampler's blocks)."""
    a, launch = _act(r), r.bill.launch
    batch = ProfileBatch(a["max_num_batched_tokens"], a["max_num_seqs"], sampler=True)
    args = (launch.arch, launch.weights, launch.tp, batch, b)
    fixed = (a["constant_bytes"], a["encoder_bytes"])
    if rules["engine"] == "v0":
        reserved = rules["non_torch_scope"] == "init_free"
        return v0_peak_terms(*args, *fixed, reserved=reserved).peak / GIB
    return peak_terms(*args, *fixed).peak / GIB


def _nt(r: Result) -> tuple[float, dict[str, Any]]:
    item = r.bill.item("non_torch")
    return item.bytes / GIB, dict(item.inputs)


NtSelect = Callable[[dict[str, Any], dict[str, Any]], float | None]


def non_torch(
    select: NtSelect, isolated: Callable[[dict[str, Any]], bool], kv: bool = False
) -> Callable[[list[Result]], list[Row]]:
    """Rows of a term of the non-torch line (non_torch.py): `select(rules, inputs)` gives the
    term's part of the line in GiB (None where it is not in it); a log whose 'non-torch forward
    increase memory' isolates it (`isolated(inputs)`) implies logged − the line's other parts;
    `kv`: with no such figure, the value the logged KV size implies (the term's source was a
    block or token count)."""

    def rows(results: list[Result]) -> list[Row]:
        out = []
        for r, rules in _vllm(results):
            nt, inputs = _nt(r)
            part = select(rules, inputs)
            if part is None:
                continue
            other = nt - part
            logged = r.case.logged.get("non_torch_gib")
            implied = logged - other if logged is not None and isolated(inputs) else None
            row = _row(r, implied, logged, _const(other), nt)
            out.append(from_kv(row, part) if kv else row)
        return out

    return rows


def _single(inputs: dict[str, Any]) -> bool:
    return inputs["tp"] * inputs["pp"] == 1


def _pp_only(inputs: dict[str, Any]) -> bool:
    return inputs["pp"] > 1 and inputs["tp"] == 1


def cuda_context(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
    """The CUDA context, counted in the 'absolute' scope (cuda_context_gib)."""
    if inputs["scope"] != "absolute" or _pp_only(inputs):
        return None
    return float(rules["cuda_context_gib"])


def base(engine: str, value: float) -> NtSelect:
    """The version's non-torch growth on one GPU (v0./v1.non_torch_base_gib at `value`)."""

    def select(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
        if rules["engine"] != engine or float(rules["non_torch_base_gib"]) != value:
            return None
        return None if _pp_only(inputs) else value

    return select


def pp_base(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
    """A pipeline stage without TP (non_torch_pp_gib)."""
    return float(rules["non_torch_pp_gib"]) if _pp_only(inputs) else None


def allreduce(value: float) -> NtSelect:
    """The all-reduce base behind an NVSwitch at one shipped value (allreduce_gib nvswitch[0])."""

    def select(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
        ok = inputs["tp"] > 1 and inputs["pp"] == 1 and inputs["interconnect"] == "nvswitch"
        return value if ok and float(rules["allreduce_gib"]["nvswitch"][0]) == value else None

    return select


def nccl(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
    """The NCCL communicators inside the growth (nccl_communicator_gib: V0 to 0.6.4, V1
    0.9.2-0.10)."""
    if inputs.get("communicator", "nccl") != "nccl" or not inputs["nccl_communicator_bytes"]:
        return None
    return inputs["nccl_communicator_bytes"] / GIB


def rccl(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
    """RCCL's communicators between Infinity Fabric-linked AMD Instinct GPUs, where the version
    counts them (rccl_communicator_gib; V0 to 0.6.4)."""
    if inputs.get("communicator") != "rccl" or not inputs["nccl_communicator_bytes"]:
        return None
    return inputs["nccl_communicator_bytes"] / GIB


def nvls(rules: dict[str, Any], inputs: dict[str, Any]) -> float | None:
    """NCCL NVLS buffers at TP > 2 behind an NVSwitch (nvls_gib, to 0.6)."""
    value = float(rules.get("nvls_gib", 0.0))
    ok = value and inputs["interconnect"] == "nvswitch" and inputs["tp"] > 2
    return value if ok else None


def free_gap(results: list[Result], shipped: float, multi: bool) -> list[Row]:
    """vLLM logs that show the memory in use before the worker's snapshot, 'Initial free memory
    F / T GiB' (T − F), on one GPU (`multi` False) or at TP/PP behind an NVSwitch (NCCL set up
    first): they imply the CUDA context (and SGLang's memory before the weights) without the
    term entering their own bill."""
    rows = []
    for r, _rules in _vllm(results):
        lg, launch = r.case.logged, r.bill.launch
        if "initial_free_gib" not in lg or "total_gib" not in lg:
            continue
        if (launch.tp * launch.pp > 1) != multi:
            continue
        if multi and interconnect_class(launch.gpu, launch.interconnect) != "nvswitch":
            continue
        gap = lg["total_gib"] - lg["initial_free_gib"]
        rows.append(_row(r, gap, gap, _const(0.0), shipped, 0.0, drives_kv=False))
    return rows


def cuda_context_rows(results: list[Result]) -> list[Row]:
    """cuda_context_gib: the absolute-scope non-torch logs, and the one-GPU free-at-start gaps."""
    return non_torch(cuda_context, _single)(results) + free_gap(
        results, float(rules_at("0.19.0")["cuda_context_gib"]), multi=False
    )


def cudagraph(results: list[Result]) -> list[Row]:
    """The CUDA-graph pool (cudagraph_gib): implied by 'Graph capturing finished ..., took X
    GiB' (inputs known); it takes from the KV memory only where the version counts it in the
    budget (0.21+), else it is captured in the 1 − utilisation headroom."""
    rows = []
    for r, rules in _vllm(results):
        if r.bill.launch.args.get("enforce_eager"):
            continue
        shipped = float(rules["cudagraph_gib"])
        logged = r.case.logged.get("cudagraph_gib")
        implied = logged if r.case.inputs_known else None
        coef = 1.0 if rules["cudagraph_in_budget"] else 0.0
        rows.append(_row(r, implied, logged, _const(0.0), shipped, coef))
    return rows


def cuda_gap(results: list[Result]) -> list[Row]:
    """nvidia-smi's total minus the total cudaMemGetInfo reports (common.py CUDA_RESERVED_BYTES,
    H100's gap assumed for every GPU): implied by a log's 'Initial free memory … / T GiB' against
    the catalog's driver total; the budget is utilisation × total."""
    rows = []
    for r, _rules in _vllm(results):
        gpu = get_gpu(r.case.gpu)
        driver = gpu.driver_total_bytes
        if not driver or gpu.vendor == "amd":  # ROCm reports the VRAM size itself: no gap
            continue
        logged = r.case.logged.get("total_gib")
        implied = None if logged is None else driver / GIB - logged
        util = float(r.bill.settings["gpu_memory_utilization"])
        rows.append(
            _row(
                r, implied, logged, lambda v, d=driver / GIB: d - v, r.bill.total_bytes / GIB, -util
            )
        )
    return rows


def sglang_context(key: str, shipped: float) -> Callable[[list[Result]], list[Row]]:
    """SGLang's memory in use before the weights, one figure per link class (sglang
    versions.toml context_gib): implied by 'avail mem=X GB' before loading against the CUDA
    total; the pool is mem_fraction_static × what is left."""

    def rows(results: list[Result]) -> list[Row]:
        out = []
        for r in results:
            if r.case.engine != "sglang" or r.bill is None:
                continue
            launch = r.bill.launch
            single = launch.tp * launch.pp == 1
            cls = "single" if single else interconnect_class(launch.gpu, launch.interconnect)
            if cls != key:
                continue
            lg = r.case.logged
            before = lg.get("avail_before_load_gb")
            if before is None and "avail_after_load_gb" in lg and "weights_gb" in lg:
                before = lg["avail_after_load_gb"] + lg["weights_gb"]  # 'avail mem' + 'mem usage'
            total = cuda_total_bytes(launch.gpu) / GIB
            implied = None if before is None else total - before
            mfs = float(r.bill.settings["mem_fraction_static"])
            out.append(_row(r, implied, implied, _const(0.0), shipped, mfs))
        if key in ("single", "nvswitch"):  # the vLLM H100 gaps the figures were read from
            out += free_gap(results, shipped, multi=key == "nvswitch")
        return out

    return rows


# --- the fitted terms --------------------------------------------------------------------------

V = "vllm/versions.toml"


def at(version: str, key: str, engine: str | None = None) -> Any:
    """A vLLM rule's shipped value at a version (the terms read their values from the rules, so
    a changed figure is scored as it stands)."""
    return rules_at(version, engine)[key]


def _sampler_term(name: str, path: str, version: str, source: str, **kw: Any) -> Term:
    value = float(at(version, "sampler_bytes", "v0" if path == "v0" else None)[path])
    paths = ("triton", "flashinfer") if value == 14.0 and path != "v0" else (path,)
    kind = "derived" if paths == ("triton", "flashinfer") else "fitted"
    return Term(
        name,
        f"{V} sampler_bytes.{path}",
        value,
        "B",
        source,
        sampler(paths, value, **kw),
        kind=kind,
    )


def _nt_term(name: str, key: str, version: str, source: str, select: Any, **kw: Any) -> Term:
    return Term(name, f"{V} {key}", float(at(version, key)), "GiB", source, select, **kw)


SG = "sglang/versions.toml context_gib"
SG_CONTEXT = SGLANG_RULES.at(SGLANG_RULES.releases[-1])["context_gib"]
NT0, NT1, NT2 = (
    at("0.7.0", "non_torch_base_gib", "v0"),
    at("0.11.0", "non_torch_base_gib"),
    at("0.19.0", "non_torch_base_gib"),
)
AR1, AR2 = (
    at("0.11.0", "allreduce_gib")["nvswitch"][0],
    at("0.19.0", "allreduce_gib")["nvswitch"][0],
)
TERMS: tuple[Term, ...] = (
    _nt_term(
        "profile-run constant c0",
        "activation_constant_gib",
        "0.19.0",
        "'torch peak memory increase' (vLLM V1)",
        activation_constant,
    ),
    _nt_term(
        "vision-encoder dummy run",
        "encoder_gib",
        "0.19.0",
        "VLM 'torch peak memory increase' (H100 0.19)",
        encoder,
    ),
    _sampler_term(
        "sampler bytes/element, V0 to 0.6",
        "v0",
        "0.6.4",
        "8 x H200 block count at 1,024 seqs (vllm#9699)",
        kv=True,
    ),
    _sampler_term(
        "sampler bytes/element, V0 0.7", "v0", "0.7.0", "RTX 4090 TP2 V0 peak (vllm#13061)"
    ),
    _sampler_term(
        "sampler bytes/element, native",
        "native",
        "0.11.0",
        "H100 0.11-0.16 peaks (37.3-37.6 implied)",
    ),
    _sampler_term(
        "sampler bytes/element, FlashInfer 0.8-0.10",
        "flashinfer",
        "0.10.0",
        "A100 80GB 0.10.1 KV left",
        kv=True,
    ),
    _sampler_term(
        "sampler bytes/element, FlashInfer 0.11-0.16",
        "flashinfer",
        "0.11.0",
        "H100 0.11 image, 0.15/0.16 sweep peaks",
    ),
    _sampler_term(
        "sampler bytes/element, Triton / FlashInfer 0.17+",
        "triton",
        "0.19.0",
        "bf16 + fp32 logits + probs + draw = 2+4+4+4 B; H100 0.19 peaks",
    ),
    _nt_term(
        "CUDA-graph pool",
        "cudagraph_gib",
        "0.19.0",
        "'Graph capturing finished ... took X GiB'",
        cudagraph,
    ),
    _nt_term(
        "CUDA context (absolute scope)",
        "cuda_context_gib",
        "0.19.0",
        "'Initial free memory' gap on one H100 (0.19); RTX 3090 absolute non-torch (0.6.4)",
        cuda_context_rows,
    ),
    Term(
        "non-torch base, V0",
        f"{V} v0.non_torch_base_gib",
        NT0,
        "GiB",
        "V0 one-GPU non-torch growth (RTX 3090 0.6.6, V0 0.7-0.8)",
        non_torch(base("v0", NT0), _single),
    ),
    Term(
        "non-torch base, V1 0.8-0.17",
        f"{V} v1.non_torch_base_gib",
        NT1,
        "GiB",
        "one-H100 non-torch growth (0.11, 0.15-0.17)",
        non_torch(base("v1", NT1), _single),
    ),
    Term(
        "non-torch base, V1 0.18+",
        f"{V} v1.non_torch_base_gib",
        NT2,
        "GiB",
        "one-H100 non-torch growth (0.19)",
        non_torch(base("v1", NT2), _single),
    ),
    _nt_term(
        "non-torch, PP stage without TP",
        "non_torch_pp_gib",
        "0.19.0",
        "PP2/PP4 non-torch growth (H100 0.19)",
        non_torch(pp_base, lambda i: True),
    ),
    Term(
        "all-reduce base, NVSwitch, to 0.15",
        f"{V} allreduce_gib.nvswitch",
        AR1,
        "GiB",
        "TP2 vs TP1 non-torch growth (H100 0.11)",
        non_torch(allreduce(AR1), lambda i: True),
    ),
    Term(
        "all-reduce base, NVSwitch, 0.16+",
        f"{V} allreduce_gib.nvswitch",
        AR2,
        "GiB",
        "TP2/TP4 non-torch growth (H100 0.19)",
        non_torch(allreduce(AR2), lambda i: True),
    ),
    _nt_term(
        "NCCL communicators (V0 to 0.6.4, V1 0.9.2-0.10)",
        "nccl_communicator_gib",
        "0.10.0",
        "A100 80GB TP2 vs TP1 KV left (0.10.1)",
        non_torch(nccl, lambda i: True, kv=True),
    ),
    _nt_term(
        "RCCL communicators, Infinity Fabric (V0 to 0.6.4)",
        "rccl_communicator_gib",
        "0.6.3",
        "MI300X TP8 block count (Hot Aisle, 0.6.3)",
        non_torch(rccl, lambda i: True, kv=True),
    ),
    _nt_term(
        "NCCL NVLS buffers (to 0.6)",
        "nvls_gib",
        "0.6.3",
        "8 x H200 block count (vllm#9699, 0.6.3)",
        non_torch(nvls, lambda i: True, kv=True),
    ),
    Term(
        "CUDA total gap (nvidia-smi - cudaMemGetInfo)",
        "profiles/common.py CUDA_RESERVED_BYTES",
        CUDA_RESERVED_BYTES / GIB,
        "GiB",
        "'Initial free memory ... / T GiB' total (H100 0.19)",
        cuda_gap,
    ),
    Term(
        "SGLang memory before weights, one GPU",
        f"{SG}.single",
        SG_CONTEXT["single"],
        "GiB",
        "one-H100 free-at-start gap (vLLM 0.19 logs)",
        sglang_context("single", SG_CONTEXT["single"]),
    ),
    Term(
        "SGLang memory before weights, NVSwitch TP",
        f"{SG}.nvswitch",
        SG_CONTEXT["nvswitch"],
        "GiB",
        "H100 TP>=2 free-at-start gap (vLLM 0.19 logs)",
        sglang_context("nvswitch", SG_CONTEXT["nvswitch"]),
    ),
    Term(
        "SGLang memory before weights, NVLink TP",
        f"{SG}.nvlink",
        SG_CONTEXT["nvlink"],
        "GiB",
        "assumed (no log)",
        sglang_context("nvlink", SG_CONTEXT["nvlink"]),
    ),
    Term(
        "SGLang memory before weights, PCIe TP",
        f"{SG}.pcie",
        SG_CONTEXT["pcie"],
        "GiB",
        "4 x L4 (0.4.3) and 4 x RTX 4090 (0.5.9) free-at-start gaps",
        sglang_context("pcie", SG_CONTEXT["pcie"]),
    ),
)

# Constants that set no point prediction, or that no log in the corpus can refit: listed by the
# report (NOT_REFITTED), not scored.
NOT_REFITTED = (
    (
        "trtllm/bill.py ACT_CONSTANT 0.12, CUDA_CONTEXT 0.45, TP_BUFFERS 0.41",
        "vLLM's H100 figures borrowed; the loader skips the corpus's one TensorRT-LLM case",
    ),
    (
        "llamacpp/bill.py CUDA_CONTEXT 0.35 GiB",
        "an allowance for --fit; no llama.cpp log prints it",
    ),
    (
        "vllm/bill.py ACT_SPREAD 0.5, non-torch spread 0.21/0.3, CUDAGRAPH_LOW/HIGH 0.5/1.9;"
        " sglang 0.5, trtllm 0.6 GiB",
        "range widths around the prediction, not the prediction",
    ),
    ("allocator.py CACHING_FRAGMENTATION 0.15", "published (GMLake §7), training bills only"),
    ("serving.py DEFAULT_HEADROOM 0.9", "the generic bill's stated rule, not fitted"),
)


# --- refit and score ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """Errors of some rows at a value: figure mean |error| (GiB) over the logs that show the
    term apart from the bill's other terms (those that imply a value), KV cases within 10 % over
    rows with tokens logged."""

    n_fig: int
    fig: float | None
    n_kv: int
    kv_ok: int
    kv_worst: float | None

    @staticmethod
    def of(pairs: list[tuple[Row, float]]) -> Score:
        fig = [
            abs(r.figure(v) - r.logged)
            for r, v in pairs
            if r.logged is not None and r.implied is not None
        ]
        kv = [abs(r.tokens_at(v) / r.tokens_logged - 1) for r, v in pairs if r.tokens_logged]
        return Score(
            len(fig),
            statistics.fmean(fig) if fig else None,
            len(kv),
            sum(e <= 0.10 for e in kv),
            max(kv) if kv else None,
        )

    def text(self) -> str:
        if not self.n_fig and not self.n_kv:
            return "no case to score"
        fig = "-" if self.fig is None else f"{self.fig:.3f} GiB ({self.n_fig})"
        kv = f"KV {self.kv_ok}/{self.n_kv}" if self.n_kv else "KV -"
        return f"{fig} · {kv}"


@dataclass(frozen=True)
class GpuLine:
    gpu: str
    n_implied: int
    logo_value: float | None  # fitted without this GPU (None: no other GPU implies the term)
    shipped: Score
    in_sample: Score
    logo: Score | None


@dataclass(frozen=True)
class TermReport:
    term: Term
    n_implied: int
    gpus_implied: tuple[str, ...]
    refit: float | None  # on every log
    shipped: Score
    in_sample: Score | None
    logo: Score | None  # each GPU predicted by the fit without it (GPUs with a LOGO value)
    logo_missing: tuple[str, ...]  # GPUs the term drives that no other GPU's logs can refit
    worst: str  # the GPU with the largest LOGO figure error (else the most KV misses)
    lines: tuple[GpuLine, ...]


def evaluate(term: Term, results: list[Result]) -> TermReport:
    rows = term.rows(results)
    implied = [r for r in rows if r.implied is not None]
    refit = fit([r.implied for r in implied]) if implied else None
    lines, logo_pairs, missing = [], [], []
    for gpu in sorted({r.gpu for r in rows}):
        mine = [r for r in rows if r.gpu == gpu]
        train = [r.implied for r in implied if r.gpu != gpu]
        value = fit(train) if train else None
        logo = Score.of([(r, value) for r in mine]) if value is not None else None
        if value is None:
            missing.append(gpu)
        else:
            logo_pairs += [(r, value) for r in mine]
        lines.append(
            GpuLine(
                gpu,
                sum(r.gpu == gpu for r in implied),
                value,
                Score.of([(r, term.shipped) for r in mine]),
                Score.of([(r, refit) for r in mine]) if refit is not None else Score.of([]),
                logo,
            )
        )
    return TermReport(
        term,
        len(implied),
        tuple(sorted({r.gpu for r in implied})),
        refit,
        Score.of([(r, term.shipped) for r in rows]),
        Score.of([(r, refit) for r in rows]) if refit is not None else None,
        _scored(Score.of(logo_pairs)) if logo_pairs else None,
        tuple(missing),
        _worst(lines),
        tuple(lines),
    )


def _scored(score: Score) -> Score | None:
    return score if score.n_fig or score.n_kv else None


def _worst(lines: list[GpuLine]) -> str:
    scored = [ln for ln in lines if ln.logo is not None and (ln.logo.n_fig or ln.logo.n_kv)]
    if not scored:
        return "-"
    by_fig = [ln for ln in scored if ln.logo.fig is not None]
    if by_fig:
        w = max(by_fig, key=lambda ln: ln.logo.fig)
        return f"{w.gpu} ({w.logo.fig:.3f} GiB)"
    w = max(scored, key=lambda ln: (ln.logo.n_kv - ln.logo.kv_ok, ln.logo.kv_worst or 0))
    return f"{w.gpu} (KV {w.logo.kv_ok}/{w.logo.n_kv})"


def report(results: list[Result]) -> list[TermReport]:
    return [evaluate(t, results) for t in TERMS]


# --- printing ----------------------------------------------------------------------------------


def _value(v: float | None, unit: str) -> str:
    return "-" if v is None else f"{v:.3f} {unit}"


def _no_logo(rep: TermReport) -> str:
    return "none: no log implies it" if not rep.n_implied else "none: one GPU type implies it"


def text(reports: list[TermReport]) -> list[str]:
    out = []
    for rep in reports:
        t = rep.term
        out += [
            f"\n== {t.name} [{t.kind}] — {t.where}",
            f"   fitted from: {t.source}",
            f"   shipped {_value(t.shipped, t.unit)}; refit (median of {rep.n_implied} log-implied"
            f" values on {len(rep.gpus_implied)} GPU types) {_value(rep.refit, t.unit)}",
            f"   all cases: shipped {rep.shipped.text()} | in-sample"
            f" {rep.in_sample.text() if rep.in_sample else '-'} | LOGO"
            f" {rep.logo.text() if rep.logo else _no_logo(rep)}",
        ]
        for ln in rep.lines:
            out.append(
                f"   {ln.gpu:<10} implied {ln.n_implied:>3}  LOGO value {_value(ln.logo_value, t.unit):>11}"
                f"  shipped {ln.shipped.text():<26} in-sample {ln.in_sample.text():<26}"
                f" LOGO {ln.logo.text() if ln.logo else '-'}"
            )
    out.append("\nnot refitted:")
    out += [f"   {what}: {why}" for what, why in NOT_REFITTED]
    return out


def markdown(reports: list[TermReport]) -> list[str]:
    out = [
        "| term | source data | shipped → refit | in-sample error | LOGO error | worst GPU (LOGO) |",
        "|---|---|---:|---|---|---|",
    ]
    for rep in reports:
        t = rep.term
        gpus = ", ".join(rep.gpus_implied) or "no log in the corpus"
        logo = rep.logo.text() if rep.logo else _no_logo(rep)
        if rep.logo and rep.logo_missing:
            logo += f"; none for {', '.join(rep.logo_missing)}"
        name = t.name + (" (derived)" if t.kind == "derived" else "")
        out.append(
            f"| {name} (`{t.where}`) | {t.source}; {rep.n_implied} log{'s' * (rep.n_implied != 1)}:"
            f" {gpus} |"
            f" {t.shipped:.3g} → {'-' if rep.refit is None else f'{rep.refit:.3g}'} {t.unit} |"
            f" {rep.in_sample.text() if rep.in_sample else '-'} | {logo} | {rep.worst} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--markdown", action="store_true", help="the README table")
    opts = p.parse_args(argv)
    reports = report(load_results())
    print("\n".join(markdown(reports) if opts.markdown else text(reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
