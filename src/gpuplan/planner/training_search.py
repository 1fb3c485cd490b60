"""Rank the training layouts of a fixed GPU count that fit, fastest first.

For N GPUs and a global batch of B tokens the search walks, for every layout:

    tp      degrees that shard the attention heads (`tp_problem`) within one node, dividing N;
            sequence parallelism on whenever tp > 1 (it divides activations at no extra traffic,
            Korthikanti et al. 2022 §4.2.2)
    pp      divisors of N ÷ tp up to min(layers, 16)
    cp      context parallelism of 2, 4, 8 for sequences of 8,192 tokens or more (ring attention
            splits the sequence; at shorter sequences it only adds K/V traffic)
    ep      expert parallelism for MoE models: powers of two up to 64 dividing the experts and
            dp × cp (Megatron-core carves the expert groups out of the data-parallel ranks)
    dp      N ÷ (tp × pp × cp); ZeRO 0-3 over it (1-3 only when dp > 1: one rank has nothing to shard),
            plus FSDP HYBRID_SHARD (ZeRO-3 within a node, replicated across) when N spans nodes
    micro   micro-batches of 1, 2, 4, ... sequences with micro × grad-accum × dp × seq = B
    recompute  none and full (selective too with eager attention; under flash/SDPA it frees no
            memory, the engine's own note, so it would only be a slower copy of none)

and keeps the layouts whose heaviest GPU fits its budget. Two facts keep it to a few hundred bills
of ~50 µs each: full recompute at micro-batch 1 is a layout's smallest bill, so a layout that does
not fit then is dropped at once; and a bill only grows with the micro-batch, so the walk up the
micro-batches stops at the first that does not fit. CPU offload (optimizer states with ZeRO 1-3,
parameters too with ZeRO-3, ZeRO-Offload, Ren et al. 2021) is tried only when nothing fits
without it, since it trades GPU memory for PCIe traffic the cost model does not price.

Ranked by the estimated tokens/s of the bill's cost model (`engine/cost.py`), ties broken by
lower per-GPU memory, then by the simpler layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from gpuplan.engine.sharding import Layout, tp_problem
from gpuplan.engine.training import TrainingBill, TrainingSetup, training_bill
from gpuplan.errors import GpuplanError

PP_MAX = 16
CP_MIN_SEQ = 8192  # context parallelism is tried from this sequence length up
CP_DEGREES = (2, 4, 8)
EP_MAX = 64
SEQUENCES_PER_GPU = 8  # the default global batch: 8 sequences of `seq` tokens per GPU


@dataclass(frozen=True)
class TrainingSearch:
    """The layouts that fit, best first, and how many bills the search built to find them."""

    options: tuple[TrainingBill, ...]
    bills: int
    offload: str  # "none", or the CPU offload every option needed


def default_global_batch_tokens(gpus: int, seq: int) -> int:
    """gpus × seq × 8: eight sequences per GPU per step, so every data-parallel degree divides
    the batch, micro-batches up to 8 can be tried, and a pipeline of up to 8 stages is full."""
    return gpus * seq * SEQUENCES_PER_GPU


def _tps(setup: TrainingSetup, gpus: int) -> list[int]:
    node = setup.gpu.gpus_per_node
    return [
        t
        for t in range(1, min(node, gpus) + 1)
        if gpus % t == 0 and tp_problem(setup.arch, t) is None
    ]


def _cps(setup: TrainingSetup, ranks: int) -> list[int]:
    """Context-parallel degrees for `ranks` = N ÷ (tp × pp): 1, and 2/4/8 for long sequences
    (each rank takes 2·cp chunks of the sequence for load balance, Megatron-core's CP)."""
    if setup.seq < CP_MIN_SEQ:
        return [1]
    return [1, *(c for c in CP_DEGREES if ranks % c == 0 and setup.seq % (2 * c) == 0)]


def _eps(setup: TrainingSetup, dp_cp: int) -> list[int]:
    """Expert-parallel degrees: 1, and for MoE models the powers of two ≤ 64 that divide the
    experts and the dp × cp ranks."""
    moe = setup.arch.moe
    if moe is None:
        return [1]
    out, e = [1], 2
    while e <= min(EP_MAX, dp_cp):
        if moe.num_experts % e == 0 and dp_cp % e == 0:
            out.append(e)
        e *= 2
    return out


def candidate_layouts(
    setup: TrainingSetup, gpus: int, offloading: bool = False
) -> Iterator[Layout]:
    """Every (tp, pp, cp, ep, dp, ZeRO/FSDP) layout of `gpus` GPUs the search considers. With
    one data-parallel rank ZeRO shards nothing, so stages 1 and 3 appear only when `offloading`
    (ZeRO-Offload runs on a single rank, Ren et al. 2021 §5)."""
    base = setup.layout
    node = setup.gpu.gpus_per_node
    layers = setup.arch.num_layers
    for tp in _tps(setup, gpus):
        for pp in range(1, min(layers, PP_MAX, gpus // tp) + 1):
            if (gpus // tp) % pp:
                continue
            ranks = gpus // (tp * pp)
            for cp in _cps(setup, ranks):
                dp = ranks // cp
                for ep in _eps(setup, dp * cp):
                    common = replace(
                        base, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sp=tp > 1, fsdp=None, hybrid=False
                    )
                    single = (0, 1, 3) if offloading else (0,)
                    for zero in range(4) if dp * cp > 1 else single:
                        yield replace(common, zero=zero)
                    if dp > 1 and gpus > node and (node // (tp * pp * cp)) > 1 and ep == 1:
                        yield replace(common, zero=3, fsdp="hybrid_shard", hybrid=True)


def _recomputes(setup: TrainingSetup) -> tuple[str, ...]:
    if setup.kernel == "eager":
        return ("full", "selective", "none")
    return ("full", "none")


def _micro_batches(per_rank: int) -> list[int]:
    """Powers of two that divide the sequences each data-parallel rank takes per step."""
    out, m = [], 1
    while m <= per_rank:
        if per_rank % m == 0:
            out.append(m)
        m *= 2
    return out


def _fits(setup: TrainingSetup) -> TrainingBill | None:
    try:
        bill = training_bill(setup)
    except GpuplanError:
        return None
    return bill if bill.fits else None


def _search(
    setup: TrainingSetup,
    gpus: int,
    batch: int,
    offloads: tuple[str, ...],
    allowed: Callable[[Layout, str], bool],
) -> tuple[list[TrainingBill], int]:
    found: list[TrainingBill] = []
    bills = 0
    for layout in candidate_layouts(setup, gpus, offloads != ("none",)):
        for offload in offloads:
            if offload == "optimizer" and (
                layout.zero == 0 or (layout.dp == 1 and layout.zero > 1)
            ):
                continue
            if offload == "params" and layout.zero != 3:
                continue
            if (offload == "none" and layout.dp == 1 and layout.zero) or not allowed(
                layout, offload
            ):
                continue
            per_rank = batch // (layout.dp * setup.seq)
            if batch % (layout.dp * setup.seq) or per_rank < 1:
                continue
            micros = _micro_batches(per_rank)
            for recompute in _recomputes(setup):
                fitted = 0
                for micro in micros:
                    candidate = replace(
                        setup,
                        layout=layout,
                        offload=offload,
                        recompute=recompute,
                        micro_batch=micro,
                        grad_accum=per_rank // micro,
                    )
                    bills += 1
                    bill = _fits(candidate)
                    if bill is None:
                        break
                    found.append(bill)
                    fitted += 1
                if recompute == "full" and not fitted:
                    break  # the layout's smallest bill does not fit: nothing else will
    return found, bills


def _rank_key(bill: TrainingBill) -> tuple[float, int, int, int, int, int]:
    lo = bill.setup.layout
    speed = bill.time.tokens_per_second if bill.time else 0.0
    return (-speed, bill.per_gpu_total_bytes, lo.tp * lo.pp, lo.zero, int(lo.hybrid), lo.pp)


def rank_training_layouts(
    setup: TrainingSetup,
    gpus: int,
    global_batch_tokens: int,
    allowed: Callable[[Layout, str], bool] = lambda layout, offload: True,
    engine: str | None = None,
) -> TrainingSearch:
    """Every layout of `gpus` GPUs that fits `setup`'s model, recipe and GPU, fastest first.

    `allowed(layout, offload)` narrows the search to what one `engine` can run. Raises a
    one-line GpuplanError when no layout fits, even with CPU offload.
    """
    if global_batch_tokens < 1 or global_batch_tokens % setup.seq:
        raise GpuplanError(
            f"global batch tokens ({global_batch_tokens:,}) must be a whole number of"
            f" sequences of {setup.seq:,} tokens"
        )
    total = 0
    for offloads in (("none",), ("optimizer", "params")):
        found, bills = _search(setup, gpus, global_batch_tokens, offloads, allowed)
        total += bills
        if found:
            found.sort(key=_rank_key)
            return TrainingSearch(tuple(found), total, found[0].setup.offload)
    sequences = global_batch_tokens // setup.seq
    if not any(sequences % lo.dp == 0 for lo in candidate_layouts(setup, gpus)):
        raise GpuplanError(
            f"the global batch of {sequences} sequences does not split over the data-parallel"
            f" ranks of any layout of {gpus} GPUs; give --global-batch-tokens a multiple of"
            f" {gpus} × {setup.seq}"
        )
    runs = f" as {engine} runs it" if engine else ""
    limit = f"the sharding and CPU offload {engine} allows" if engine else "ZeRO-3, CPU offload"
    raise GpuplanError(
        f"no layout of {gpus} × {setup.gpu.name} fits {setup.arch.name} for training{runs}"
        f" ({total} bills tried, up to full recompute and {limit});"
        " use more GPUs, --lora-rank/--qlora or a shorter --seq"
    )
