"""Training step time from operators: MFU comes out instead of going in.

Per pipeline rank, over the m micro-batches of one optimizer step (T = micro-batch × seq × m ÷ cp
tokens through the rank's stage, L layers, N matmul parameters, h hidden, H·Q attention width):

    GEMMs       6·N·T ÷ (tp·pp) FLOPs (Kaplan et al. 2020 §2.1: forward 2N, backward 4N per token;
                4·N·T with a frozen base, Hu et al. 2021 §4.2) at the family's bf16 GEMM
                efficiency (train_speed.toml [gemm_efficiency]); with FP8 linear layers
                (Transformer Engine, torchao float8: forward and backward GEMMs in FP8, the LM head
                in bf16) those at the dense FP8 peak × [gemm_efficiency_fp8]
    attention   flash: 7·s·H·Q·T·L ÷ (tp·pp) FLOPs, the causal forward 2·s·H·Q per token and layer
                and a backward 2.5× it (Dao 2023, FlashAttention-2 §3.2 counts the backward's five
                matmuls against the forward's two), at the kernel's published efficiency;
                eager: the masked 12·s·H·Q at GEMM efficiency plus the scores' softmax/dropout
                traffic (Korthikanti et al. 2022 §4.1: 5·a·s² bytes per sequence and layer)
    elementwise norms, activations, residuals: k × the bytes a layer saves per token
                (Korthikanti et al. 2022 eq. 1-4: 34·h, (10 + 24/tp)·h with TP, 34·h/tp with SP),
                ×3 (forward writes, backward reads and writes), at HBM bandwidth
    recompute   full: one more forward of each (GEMM 2·N·T, attention 2·s·H·Q·T, elementwise ⅓);
                selective (Megatron's core attention): the attention forward; op (torchtitan's
                op-level SAC): half the forward matmuls, N·T, and the elementwise forward; every:k,
                block:n, uniform:k: the full forward on the checkpointed share of the layers
    bubble      (pp − 1) ÷ (v·m) of the compute (Narayanan et al. 2021 §2.2.1 eq. 1; interleaved
                §2.2.2: divided by v)
    optimizer   Adam's memory-bound step over the rank's trainable shard (train_speed.toml)

Communication per parallel dimension, bytes from engine/cost.py at NCCL bus bandwidth
(train_speed.toml [nccl_efficiency]) of NVLink within a node, else of the node network:

    TP          all-reduces / all-gathers + reduce-scatters on the critical path (Megatron-LM
                runs them between the GEMMs that need them; Shoeybi et al. 2019 §3)
    DP          ZeRO 0-2: the gradient all-reduce overlaps the last micro-batch's backward (PyTorch
                DDP buckets, Li et al. 2020 §3.2.3; Megatron's overlap_grad_reduce) and only what
                outlasts it is exposed; ZeRO-3/FSDP: all-gathers and reduce-scatters prefetched
                behind the compute they feed (Rajbhandari et al. 2020 §7; torchtitan/FSDP2
                prefetching), exposed where they outlast it; HSDP's cross-node all-reduce as DP
    PP          one activation and one gradient per micro-batch and chunk, exposed
    CP          the K/V ring overlaps each chunk's attention (Liu et al. 2023 §3): what outlasts it
    EP          all-to-all dispatch and combine, exposed (GShard, Lepikhin et al. 2020 §2.2)

MFU = model FLOPs (6·N·D + 12·L·H·Q·s·D, PaLM App. B) ÷ (GPUs × peak × step time).
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.cost import CommBytes, StepFlops, StepTime
from gpuplan.engine.frozen import record
from gpuplan.engine.pipeline import bubble_fraction

if TYPE_CHECKING:
    from gpuplan.engine.training import TrainingSetup


@lru_cache(maxsize=1)
def speed_table() -> dict[str, Any]:
    """train_speed.toml, read once."""
    return tomllib.loads(Path(__file__).with_name("train_speed.toml").read_text("utf-8"))


def gpu_family(compute_capability: str | None, vendor: str = "nvidia") -> str | None:
    """The architecture family of a GPU (train_speed.toml [family]); None when unknown."""
    fam: dict[str, str] = speed_table()["family"]
    if vendor != "nvidia":
        return fam.get(vendor)
    return fam.get(compute_capability or "")


@record
class Efficiencies:
    """The figures the step time runs at (train_speed.toml, or a fit's)."""

    gemm: float
    gemm_fp8: float  # of the dense FP8 peak, for FP8 linear layers (the recipe's stack)
    flash: float
    elementwise_eager: float
    elementwise_fused: float
    elementwise_compiled: float
    nccl_intra: float
    nccl_network: float
    optimizer_bytes_per_param: float
    tile: int = 1  # the GEMM tile's width in output features (tile quantisation)
    gemm_assumed_from: str = ""  # the family whose GEMM figure an unmeasured family takes


def efficiencies(
    family: str, attention: str = "flash2", fp8_stack: str = "te", **override: float
) -> Efficiencies:
    """The table's efficiencies for one family, attention kernel and FP8 stack (te: Transformer
    Engine; torchao: torchao float8); `override` replaces any (the accuracy bench's
    leave-one-source-out refits)."""
    t = speed_table()
    gemm = t["gemm_efficiency"]
    fp8 = t["gemm_efficiency_fp8"].get(fp8_stack, t["gemm_efficiency_fp8"]["te"])
    assumed = "" if family in gemm else t["gemm_assumed_from"].get(family, "hopper")
    fp8_from = family if family in fp8 else t["gemm_assumed_from"].get(family, "hopper")
    kernel = attention if attention in t["flash_efficiency"] else "flash2"
    values = {
        "gemm": gemm.get(family, gemm[assumed or "hopper"]),
        "gemm_fp8": fp8.get(fp8_from, fp8["hopper"]),
        "flash": t["flash_efficiency"][kernel].get(family, 0.33),
        "elementwise_eager": t["elementwise"]["eager"],
        "elementwise_fused": t["elementwise"]["fused"],
        "elementwise_compiled": t["elementwise"]["compiled"],
        "nccl_intra": t["nccl_efficiency"]["intra"],
        "nccl_network": t["nccl_efficiency"]["network"],
        "optimizer_bytes_per_param": t["optimizer"]["bytes_per_param"],
        "tile": t["gemm_tile"].get(family, 128),
    }
    values.update(override)
    return Efficiencies(**values, gemm_assumed_from=assumed)


@record
class SpeedModel:
    """What the model fixes for the step time."""

    flop_params: int  # N of 6ND: the matmul parameters a token passes (active, for MoE)
    layers: int
    hidden: int
    attn_width: int  # query heads × head dim
    attn_layers: int  # layers with softmax attention (the rest: linear mixers, no s² term)
    heads: int
    moe_layers: int = 0
    top_k: int = 0
    head_params: int = 0  # the LM head's, part of flop_params: kept in bf16 under FP8 recipes
    # the sliding windows of the windowed attention layers (of attn_layers)
    windows: tuple[int, ...] = ()
    # (output features, input features) of a layer's linears and the LM head, before tensor
    # parallelism: the shapes `tile_efficiency` quantises
    widths: tuple[tuple[int, int], ...] = ()

    def tile_efficiency(self, tp: int, tile: int) -> float:
        """The share of a GEMM's tiles doing useful work when each linear's output features,
        split over `tp` ranks, are covered by tiles `tile` wide (tile quantisation, NVIDIA Deep
        Learning Performance Guide, "Matrix Multiplication Background": a width one past a
        multiple of the tile costs a whole extra tile), weighted by the linears' FLOPs."""
        if not self.widths or tile <= 1:
            return 1.0
        useful = padded = 0.0
        for n, k in self.widths:
            width = n / tp
            useful += width * k
            padded += -(-width // tile) * tile * k
        return useful / padded if padded else 1.0

    def attended(self, seq: int) -> float:
        """Σ over attention layers of the keys a query attends, as a multiple of `seq`: a full
        layer s, a sliding-window layer min(s, w) (Beltagy et al. 2020, Longformer §3)."""
        full = self.attn_layers - len(self.windows)
        return full + sum(min(seq, w) for w in self.windows) / seq


@record
class SpeedLayout:
    """What the layout fixes: parallel degrees, batch, recompute, kernels."""

    dp: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    zero: int = 0
    hybrid: bool = False
    sp: bool = False
    micro_batch: int = 1
    micro_batches: int = 1
    seq: int = 4096
    recompute: str = "none"  # none, selective, op, full, every/block/uniform
    checkpointed_share: float = 1.0
    frozen_base: bool = False
    eager_attention: bool = False
    kernels: str = "eager"  # elementwise ops: eager, fused (Megatron/TE kernels), compiled
    fp8: str = (
        ""  # linear layers in FP8 ("te": Transformer Engine, "torchao": float8), LM head bf16
    )
    gpus_per_node: int = 8

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


@record
class SpeedGpu:
    peak_flops: float  # dense bf16, FLOP/s
    hbm_bytes_per_s: float
    intra_bytes_per_s: float  # NVLink (or PCIe) per direction
    network_bytes_per_s: float  # node network per GPU
    fp8_peak_flops: float = 0.0  # dense FP8, FLOP/s (0: none)


@record
class StepBreakdown:
    """One step's time on the slowest rank, by where it goes (seconds)."""

    gemm_s: float
    attention_s: float
    elementwise_s: float
    recompute_s: float
    optimizer_s: float
    bubble_s: float
    tp_s: float
    dp_s: float
    pp_s: float
    cp_s: float
    ep_s: float

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.recompute_s

    @property
    def exposed_comm_s(self) -> float:
        return self.tp_s + self.dp_s + self.pp_s + self.cp_s + self.ep_s

    @property
    def critical_comm_s(self) -> float:
        """What no overlap hides: TP, PP and EP traffic."""
        return self.tp_s + self.pp_s + self.ep_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.optimizer_s + self.bubble_s + self.exposed_comm_s

    def to_dict(self) -> dict[str, float]:
        keys = ("gemm_s", "attention_s", "elementwise_s", "recompute_s", "optimizer_s")
        out = {k: getattr(self, k) for k in keys}
        out["bubble_s"] = self.bubble_s
        for k in ("tp", "dp", "pp", "cp", "ep"):
            out[f"exposed_{k}_s"] = getattr(self, f"{k}_s")
        return out


@record
class _Passes:
    """Per-rank forward/backward work of one step: FLOPs and bytes."""

    gemm_flops: float
    attn_flops: float  # executed, flash or eager matmuls
    attn_bytes: float  # eager softmax/dropout traffic
    elem_bytes: float  # forward + backward elementwise traffic


def _passes(m: SpeedModel, lo: SpeedLayout, e: Efficiencies) -> _Passes:
    """The forward and backward work of the rank's stage over the step (module docstring)."""
    tokens = lo.micro_batch * lo.seq * lo.micro_batches / lo.cp
    split = lo.tp * lo.pp
    gemm = (4 if lo.frozen_base else 6) * m.flop_params * tokens / split
    attn_layers = m.attended(lo.seq) / lo.pp
    if lo.eager_attention:
        attn = 12 * lo.seq * m.attn_width * tokens * attn_layers / lo.tp
        scores = 3 * 5 * m.heads * lo.seq * tokens * attn_layers / lo.tp
    else:
        attn = 7 * lo.seq * m.attn_width * tokens * attn_layers / lo.tp
        scores = 0.0
    per_layer = 34 / lo.tp if lo.sp else (10 + 24 / lo.tp)
    k = {"fused": e.elementwise_fused, "compiled": e.elementwise_compiled}.get(
        lo.kernels, e.elementwise_eager
    )
    elem = 3 * k * per_layer * m.hidden * tokens * m.layers / lo.pp
    return _Passes(gemm, attn, scores, elem)


def _recompute_share(lo: SpeedLayout) -> tuple[float, float, float]:
    """Extra forward work as shares of (GEMM forward, attention forward, elementwise forward)."""
    mode = lo.recompute.partition(":")[0]
    if mode == "full":
        return 1.0, 1.0, 1.0
    if mode in ("every", "block", "uniform"):
        s = lo.checkpointed_share
        return s, s, s
    if mode == "op":
        return 0.5, 0.0, 1.0
    if mode == "selective":
        return 0.0, 1.0, 0.0
    return 0.0, 0.0, 0.0


def _compute(
    m: SpeedModel, lo: SpeedLayout, g: SpeedGpu, e: Efficiencies
) -> tuple[float, float, float, float]:
    """(GEMM, attention, elementwise, recompute) seconds on one rank over the step."""
    p = _passes(m, lo, e)
    tiles = m.tile_efficiency(lo.tp, e.tile)
    gemm_rate = g.peak_flops * e.gemm * tiles
    attn_rate = g.peak_flops * e.gemm if lo.eager_attention else g.peak_flops * e.flash
    gemm_s = p.gemm_flops / gemm_rate
    if lo.fp8 and g.fp8_peak_flops:
        linear = 1 - m.head_params / max(1, m.flop_params)  # the LM head stays bf16
        fp8_rate = g.fp8_peak_flops * e.gemm_fp8 * tiles
        gemm_s = p.gemm_flops * (linear / fp8_rate + (1 - linear) / gemm_rate)
        gemm_rate = p.gemm_flops / gemm_s if gemm_s > 0 else gemm_rate
    attn_s = p.attn_flops / attn_rate + p.attn_bytes / g.hbm_bytes_per_s
    elem_s = p.elem_bytes / g.hbm_bytes_per_s
    rg, ra, re = _recompute_share(lo)
    fwd_gemm = p.gemm_flops / (4 if lo.frozen_base else 6) * 2
    attn_fwd = attn_s * (2 / 7 if not lo.eager_attention else 1 / 3)
    recompute = rg * fwd_gemm / gemm_rate + ra * attn_fwd + re * elem_s / 3
    return gemm_s, attn_s, elem_s, recompute


def _bandwidth(g: SpeedGpu, e: Efficiencies, group_span: int, node: int) -> float:
    """NCCL bus bandwidth of a group whose ranks span `group_span` consecutive GPUs."""
    if group_span <= node:
        return g.intra_bytes_per_s * e.nccl_intra
    return g.network_bytes_per_s * e.nccl_network


def _dp_exposed(
    comm: CommBytes,
    sharded_dp: float,
    lo: SpeedLayout,
    g: SpeedGpu,
    e: Efficiencies,
    compute_s: float,
) -> float:
    """Exposed data-parallel time (module docstring): ZeRO-3 behind the compute it feeds, the
    gradient all-reduce (and HSDP's cross-node one) behind the last micro-batch's backward."""
    node = lo.gpus_per_node
    inner = lo.tp * lo.cp
    shard_span = inner * (min(lo.dp, node // max(1, inner)) if lo.hybrid else lo.dp)
    shard_bw = _bandwidth(g, e, shard_span, node)
    cross_bw = _bandwidth(g, e, lo.gpus, node)
    window = compute_s / lo.micro_batches * 2 / 3
    cross_s = (comm.dp - sharded_dp) / cross_bw
    if lo.zero == 3:
        hidden_behind = compute_s
        return max(0.0, sharded_dp / shard_bw - hidden_behind) + max(0.0, cross_s - window)
    return max(0.0, sharded_dp / shard_bw + cross_s - window)


def operator_step(
    m: SpeedModel,
    lo: SpeedLayout,
    g: SpeedGpu,
    e: Efficiencies,
    comm: CommBytes,
    sharded_dp: float,
    trainable_local: float,
) -> StepBreakdown:
    """One step's time, by where it goes (module docstring). `comm` is engine/cost.py's bytes
    per GPU per step; `sharded_dp` the part of comm.dp within the shard group (the rest is
    HSDP's cross-node all-reduce); `trainable_local` the parameters this rank's optimizer steps."""
    gemm_s, attn_s, elem_s, rec_s = _compute(m, lo, g, e)
    compute = gemm_s + attn_s + elem_s + rec_s
    node = lo.gpus_per_node
    intra = _bandwidth(g, e, lo.tp, node)
    tp_s = comm.tp / intra if lo.tp > 1 else 0.0
    pp_bw = _bandwidth(g, e, lo.gpus if lo.pp > 1 else 1, node)
    pp_s = comm.pp / pp_bw
    cp_s = max(0.0, comm.cp / _bandwidth(g, e, lo.tp * lo.cp, node) - attn_s)
    ep_s = comm.ep / _bandwidth(g, e, lo.tp * lo.ep, node)
    dp_s = _dp_exposed(comm, sharded_dp, lo, g, e, compute) if lo.dp * lo.cp > 1 else 0.0
    bubble = compute * bubble_fraction(lo.pp, lo.vpp, lo.micro_batches)
    opt = trainable_local * e.optimizer_bytes_per_param / g.hbm_bytes_per_s
    return StepBreakdown(gemm_s, attn_s, elem_s, rec_s, opt, bubble, tp_s, dp_s, pp_s, cp_s, ep_s)


def model_flops(m: SpeedModel, tokens: float, seq: int) -> float:
    """6·N·D + 12·L·H·Q·s·D: the model FLOPs MFU is measured against (PaLM, Chowdhery et al.
    2022 App. B; torchtitan and llm-foundry count the same)."""
    return 6 * m.flop_params * tokens + 12 * m.attended(seq) * m.attn_width * seq * tokens


# --- a training bill's step time ------------------------------------------------------------


@lru_cache(maxsize=256)
def speed_model(arch: Architecture, flop_params: int) -> SpeedModel:
    """What `arch` fixes for the step time (memoised: a planner's layouts share it)."""
    a = arch.attention
    attn_layers = sum(1 for layer in arch.layers if layer.has_attention)
    windows = tuple(
        layer.sliding_window
        for layer in arch.layers
        if layer.has_attention and layer.sliding_window is not None
    )
    moe_layers = sum(1 for layer in arch.layers if layer.moe)
    top_k = arch.moe.experts_per_token if arch.moe is not None else 0
    return SpeedModel(
        flop_params,
        arch.num_layers,
        arch.hidden_size,
        a.num_heads * a.head_dim,
        attn_layers,
        a.num_heads,
        moe_layers,
        top_k,
        arch.vocab_size * arch.hidden_size,
        windows,
        linear_widths(arch),
    )


def linear_widths(arch: Architecture) -> tuple[tuple[int, int], ...]:
    """(output, input) features of one dense layer's linears and the LM head: q, k, v, o, the
    MLP's up (and gate) and down (a MoE layer's experts are left to the dense shapes)."""
    a, h = arch.attention, arch.hidden_size
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    out = [(q, h), (kv, h), (kv, h), (h, q)]
    if arch.mlp is not None:
        ffn = arch.mlp.intermediate_size
        out += [(ffn, h)] * (2 if arch.mlp.gated else 1) + [(h, ffn)]
    out.append((arch.vocab_size, h))
    return tuple(out)


@lru_cache(maxsize=64)
def _efficiencies(compute_capability: str | None, vendor: str, kernel: str) -> Efficiencies:
    return efficiencies(gpu_family(compute_capability, vendor) or "hopper", kernel)


def operator_time(
    setup: TrainingSetup,
    flop_params_: int,
    share: float,
    flops: StepFlops,
    comm: CommBytes,
    sharded_dp: float,
    trainable_local: float,
    intra_bytes_per_s: float,
) -> StepTime:
    """A training bill's step time from operators (`operator_step`), as engine/cost.py's
    StepTime with the breakdown and the MFU it achieves."""
    lo, gpu, fw = setup.layout, setup.gpu, setup.framework
    kernel = "flash3" if fw.id.startswith(("megatron", "nemo")) else "flash2"
    e = _efficiencies(gpu.compute_capability, gpu.vendor, kernel)
    layout = SpeedLayout(
        dp=lo.dp,
        tp=lo.tp,
        pp=lo.pp,
        cp=lo.cp,
        ep=lo.ep,
        vpp=lo.vpp,
        zero=lo.zero,
        hybrid=lo.hybrid,
        sp=lo.sp,
        micro_batch=setup.micro_batch,
        micro_batches=setup.micro_batches,
        seq=setup.seq,
        recompute=setup.recompute,
        checkpointed_share=share,
        frozen_base=setup.lora is not None,
        eager_attention=setup.kernel == "eager",
        kernels="compiled" if fw.compile else ("fused" if fw.fused != "none" else "eager"),
        gpus_per_node=gpu.gpus_per_node,
    )
    peak = (gpu.half_dense_tflops or 0.0) * 1e12  # bf16, else fp16 (T4, V100: no bf16 rate)
    g = SpeedGpu(
        peak,
        gpu.memory_bandwidth_bytes_per_s or 0.0,
        intra_bytes_per_s,
        setup.network_bytes_per_s,
        (gpu.fp8_dense_tflops or 0.0) * 1e12,
    )
    b = operator_step(
        speed_model(setup.arch, flop_params_), layout, g, e, comm, sharded_dp, trainable_local
    )
    step = b.step_s
    tokens = setup.tokens_per_step
    mfu = flops.model / (lo.gpus * peak * step) if step > 0 else 0.0
    return StepTime(
        compute_s=b.compute_s + b.optimizer_s,
        comm_s=b.exposed_comm_s,
        exposed_comm_s=b.exposed_comm_s,
        critical_comm_s=b.critical_comm_s,
        bubble=bubble_fraction(lo.pp, lo.vpp, setup.micro_batches),
        step_s=step,
        tokens_per_second=tokens / step if step > 0 else 0.0,
        mfu=mfu,
        peak_flops=peak,
        breakdown=b,
        network_source=network_source(setup.network_bytes_per_s),
        assumed=assumed_note(
            gpu_family(gpu.compute_capability, gpu.vendor),
            e,
            "" if gpu.interconnect_bytes_per_s_per_dir else gpu.name,
        ),
    )


def assumed_note(family: str | None, e: Efficiencies, no_interconnect: str = "") -> str:
    """What the step time took from elsewhere, said in the output: another architecture's
    efficiencies, or the node network's bandwidth within a node whose interconnect the catalog
    lacks (`no_interconnect`: the GPU's name)."""
    notes = []
    if family is None:
        notes.append("unknown GPU architecture: Hopper's efficiencies assumed")
    elif e.gemm_assumed_from:
        notes.append(
            f"no published training measurement for {family}: the GEMM efficiency of"
            f" {e.gemm_assumed_from} assumed"
        )
    if no_interconnect:
        notes.append(
            f"the GPU catalog has no interconnect bandwidth for {no_interconnect}: the node"
            " network's used within the node too"
        )
    return "; ".join(notes)


def network_source(bytes_per_s: float) -> str:
    """Where the node network figure came from: the table's sourced default, or the user's."""
    net = speed_table()["network"]
    if bytes_per_s == net["default_bytes_per_s"]:
        return f"default: {net['default_source']}"
    return "given"
