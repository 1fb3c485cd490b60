"""What each training choice costs: FLOPs per step, bytes communicated per GPU, step time.

FLOPs (Kaplan et al. 2020 §2.1; Chinchilla's C ≈ 6ND; PaLM, Chowdhery et al. 2022, App. B):
    forward 2N + backward 4N per token, plus attention 12·L·n_heads·d_head·s per token (L the
    attention layers, a sliding-window layer counted min(s, w)/s, `attended_layers`),
    so a step of D tokens is 6·N·D + 12·L·H·Q·s·D. Full recompute re-runs the forward:
    8·N·D (the lesson's "a third more compute"); selective recompute re-runs only the attention
    core (+ 4·L·H·Q·s·D). With a frozen base (LoRA) the backward skips the weight gradients:
    4·N·D (Hu et al. 2021 §4.2 notes the saving). N counts the active parameters that do matmuls
    (the input embedding lookup is excluded, a tied LM head is kept).

Communication, bytes sent per GPU per step, ring collectives (an all-reduce of M bytes over d
ranks sends 2·(d − 1)/d·M; all-gather and reduce-scatter (d − 1)/d·M each):
    data parallel / ZeRO-1/2    2Ψ (reduce-scatter + all-gather = all-reduce)    ZeRO §7
    ZeRO-3 / FSDP FULL_SHARD    3Ψ = 1.5× (all-gather in forward and backward + reduce-scatter),
                                per micro-batch
    tensor parallel             4 all-reduces of b·s·h per layer per micro-batch (2 forward,
                                2 backward; 6 with full recompute), Shoeybi et al. 2019 §3;
                                the same volume as SP's all-gathers + reduce-scatters
    pipeline parallel           one activation forward and one gradient back per micro-batch
    context parallel            K and V passed around the ring: (cp − 1) chunks forward, twice
                                that backward, per layer (Liu et al. 2023, Ring Attention)
    expert parallel             all-to-all dispatch + combine, forward and backward: 4·T·k·h
                                per MoE layer per micro-batch (Lepikhin et al. 2020, GShard)

Step time: compute = FLOPs per GPU ÷ (peak bf16 × utilisation) × (1 + (pp − 1)/m) for the 1F1B
pipeline bubble (Narayanan et al. 2021 §2.2). Data-parallel traffic overlaps with compute (DDP/FSDP
buckets) and only the excess is exposed; TP, CP, EP and PP traffic is on the critical path.
The utilisation is applied to the FLOPs actually executed, so recompute costs time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import record
from gpuplan.engine.params import ParamCounts
from gpuplan.engine.pipeline import bubble_fraction

if TYPE_CHECKING:
    from gpuplan.engine.train_speed import StepBreakdown

DEFAULT_MFU = 0.4
DEFAULT_NETWORK_BYTES_PER_S = 50e9  # 400 Gb/s InfiniBand NDR per GPU, one direction


def _ring(d: int) -> float:
    return (d - 1) / d if d > 1 else 0.0


def flop_params(arch: Architecture, counts: ParamCounts) -> int:
    """N of 6ND: the active parameters that do matmuls (Kaplan et al. 2020 §2.1 leave out the
    embedding). The input embedding is a lookup, not a matmul, so it is excluded; a tied LM head
    still multiplies every token's hidden state, so only learned positions leave with it. An
    encoder-decoder leaves out its embedding stack (token and position tables, Whisper's
    convolutions) and keeps both stacks and the head (the shared table when the head is tied)."""
    if arch.encoder is not None:
        tied = not dict(arch.encoder.parts).get("head.lm_head")
        head = arch.vocab_size * arch.hidden_size if tied else 0
        return max(0, counts.total - arch.encoder.stack("embed") + head)
    embedding = (
        counts.embedding
        if not arch.tie_word_embeddings
        else arch.learned_positions * arch.hidden_size
    )
    return max(0, counts.active - embedding)


@lru_cache(maxsize=1024)
def attended_layers(arch: Architecture, seq: int) -> float:
    """The attention term's layer count at sequence length `seq`: each softmax-attention layer
    once, a sliding-window layer min(s, w)/s of one (Beltagy et al. 2020, Longformer §3: a
    query attends w keys), a layer without attention (Mamba, linear attention) none."""
    total = 0.0
    for layer in arch.layers:
        if layer.has_attention:
            w = layer.sliding_window
            total += 1.0 if w is None else min(seq, w) / seq
    return total


@record
class StepFlops:
    model: float  # 6ND + attention: what MFU is measured against
    executed: float  # with recompute (and a frozen base's skipped weight gradients)


def step_flops(
    arch: Architecture,
    flop_params: int,
    tokens: int,
    seq: int,
    recompute: str = "none",
    frozen_base: bool = False,
    checkpointed_share: float = 1.0,
) -> StepFlops:
    """FLOPs of one optimizer step over `tokens` tokens (all GPUs together).

    model = 6·N·D + 12·L·H·Q·s·D (Kaplan et al. 2020 §2.1, PaLM App. B); executed adds a full
    recompute's second forward (2·N·D + a third of the attention term) or a selective one's
    attention core, and drops the weight gradients (2·N·D) of a frozen base. Every:k re-runs the
    forward of one block in k, Megatron's block:n and uniform:k the checkpointed share of the
    layers (`checkpointed_share`); torchtitan's op-level selective mode re-runs every second
    matmul and the (cheap) rest but not attention: about half the dense forward, N·D."""
    a = arch.attention
    attn = 12 * attended_layers(arch, seq) * a.num_heads * a.head_dim * seq * tokens
    model = 6 * flop_params * tokens + attn
    dense_factor = 4 if frozen_base else 6
    executed: float = dense_factor * flop_params * tokens + attn
    mode = recompute.partition(":")[0]
    if mode == "full":
        executed += 2 * flop_params * tokens + attn / 3
    elif mode in ("every", "block", "uniform"):
        executed += (2 * flop_params * tokens + attn / 3) * checkpointed_share
    elif mode == "op":
        executed += flop_params * tokens
    elif mode == "selective":
        executed += attn / 3
    return StepFlops(float(model), float(executed))


@record
class CommBytes:
    """Bytes one GPU sends per step, by kind of parallelism."""

    dp: float = 0.0
    tp: float = 0.0
    pp: float = 0.0
    cp: float = 0.0
    ep: float = 0.0

    @property
    def total(self) -> float:
        return self.dp + self.tp + self.pp + self.cp + self.ep

    def to_dict(self) -> dict[str, int]:
        return {k: round(getattr(self, k)) for k in ("dp", "tp", "pp", "cp", "ep")}


def dp_comm_bytes(
    trainable: int,
    weight_bytes: float,
    grad_bytes: float,
    zero: int,
    shard: int,
    replicas: int = 1,
    micro_batches: int = 1,
) -> float:
    """Data-parallel bytes per GPU per step for Ψ = `trainable` parameters on this GPU.

    ZeRO 0-2: 2Ψ of gradients (one all-reduce, or reduce-scatter + all-gather) over the shard
    ranks. ZeRO-3: 3Ψ per micro-batch (two weight all-gathers and one gradient reduce-scatter).
    Hybrid sharding adds an all-reduce of each shard across the `replicas` node groups.
    (Rajbhandari et al. 2020 §7.1-7.2; each collective scaled by the ring's (d − 1)/d.)
    """
    if zero == 3:
        sharded = micro_batches * (2 * weight_bytes + grad_bytes) * trainable * _ring(shard)
    else:
        sharded = 2 * grad_bytes * trainable * _ring(shard)
    cross = 2 * grad_bytes * trainable / max(1, shard) * _ring(replicas)
    return sharded + cross


def frozen_gather_bytes(frozen_bytes: float, shard: int, micro_batches: int = 1) -> float:
    """Bytes per GPU per step to all-gather a sharded frozen base (LoRA under ZeRO-3 / FSDP
    FULL_SHARD): gathered before its forward and again before its backward, every micro-batch,
    like trained weights (Zhao et al. 2023 §3.2), but with no gradient to reduce-scatter."""
    if shard <= 1:
        return 0.0
    return 2 * micro_batches * frozen_bytes * (shard - 1) / shard


def tp_comm_bytes(
    tp: int,
    act_bytes: int,
    tokens: int,
    hidden: int,
    layers: int,
    micro_batches: int,
    recompute: str,
) -> float:
    """Tensor-parallel bytes per GPU per step (Shoeybi et al. 2019 §3, Figure 4): each layer
    all-reduces its a·T·h output twice in the forward (attention, MLP) and twice in the backward;
    a full recompute runs the forward's two again. A ring all-reduce sends 2·(tp − 1)/tp of it."""
    ring = 2 * (tp - 1) / tp if tp > 1 else 0.0
    collectives = 6 if recompute == "full" else 4
    return collectives * ring * act_bytes * tokens * hidden * layers * micro_batches


def pp_comm_bytes(
    pp: int,
    act_bytes: int,
    tokens: int,
    hidden: int,
    micro_batches: int,
    boundary_split: int = 1,
    vpp: int = 1,
) -> float:
    """Pipeline bytes per GPU per step: one a·T·h activation forward and its gradient back per
    micro-batch and model chunk (Narayanan et al. 2021 §2.2; interleaving "increases the amount
    of communication by v", §2.2.2). With sequence parallelism each of the tp ranks holds and
    sends only its 1/tp of the boundary (`boundary_split`; ibid. §4.1 scatter/gather)."""
    if pp <= 1:
        return 0.0
    return 2 * act_bytes * tokens * hidden / boundary_split * micro_batches * vpp


def cp_comm_bytes(
    arch: Architecture,
    cp: int,
    tp: int,
    act_bytes: int,
    tokens: int,
    layers: int,
    micro_batches: int,
) -> float:
    """Context-parallel bytes per GPU per step (Liu et al. 2023, Ring Attention §3): each layer
    passes its K and V chunk (the rank's ⌈KV heads ÷ tp⌉ heads) to the next rank cp − 1 times in
    the forward, and K, V and their gradients twice that in the backward: 3·(cp − 1) chunks."""
    if cp <= 1:
        return 0.0
    a = arch.attention
    kv_heads = max(1, -(-a.num_kv_heads // tp))
    kv_chunk = act_bytes * tokens * kv_heads * (a.head_dim + a.v_head_dim)
    return 3 * (cp - 1) * kv_chunk * layers * micro_batches


def ep_comm_bytes(
    arch: Architecture, ep: int, act_bytes: int, tokens: int, moe_layers: int, micro_batches: int
) -> float:
    """Expert-parallel bytes per GPU per step (Lepikhin et al. 2020, GShard §2.2): an all-to-all
    dispatch and combine of the T·k routed a·h token vectors in the forward, and again in the
    backward (4·T·k·h·a), of which (ep − 1)/ep leave the GPU, per MoE layer and micro-batch."""
    if ep <= 1 or arch.moe is None:
        return 0.0
    k, h = arch.moe.experts_per_token, arch.hidden_size
    return 4 * tokens * k * h * act_bytes * (ep - 1) / ep * moe_layers * micro_batches


@record
class StepTime:
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    critical_comm_s: float  # TP, CP, EP and PP traffic: exposed whatever the overlap
    bubble: float
    step_s: float
    tokens_per_second: float
    mfu: float  # the pinned MFU, or the one the operators' step time achieves
    peak_flops: float
    breakdown: StepBreakdown | None = None  # engine/train_speed.py (None: the MFU was pinned)
    network_source: str = ""  # where the node network figure came from (operators' step time)
    assumed: str = ""  # what the step time assumed that the output must say

    @property
    def mfu_pinned(self) -> bool:
        return self.breakdown is None


def step_time(
    flops: StepFlops,
    gpus: int,
    tokens: int,
    peak_flops: float,
    mfu: float,
    comm: CommBytes,
    intra_bytes_per_s: float,
    network_bytes_per_s: float,
    dp_spans_nodes: bool,
    pp_spans_nodes: bool,
    pp: int,
    micro_batches: int,
    vpp: int = 1,
) -> StepTime:
    """Step time and throughput at utilisation `mfu` of `peak_flops` per GPU.

    compute = executed FLOPs ÷ GPUs ÷ (peak × mfu) × (1 + (pp − 1)/(vpp·m)), the (interleaved)
    1F1B bubble of Narayanan et al. 2021 §2.2 (engine/pipeline.py); data-parallel traffic hides behind compute and only its excess
    is exposed; TP, CP, EP and PP traffic is on the critical path."""
    bubble = bubble_fraction(pp, vpp, micro_batches)
    compute = flops.executed / gpus / (peak_flops * mfu) * (1 + bubble)
    dp_bw = network_bytes_per_s if dp_spans_nodes else intra_bytes_per_s
    pp_bw = network_bytes_per_s if pp_spans_nodes else intra_bytes_per_s
    dp_s = comm.dp / dp_bw
    critical = (comm.tp + comm.cp + comm.ep) / intra_bytes_per_s + comm.pp / pp_bw
    exposed = max(0.0, dp_s - compute) + critical
    step = compute + exposed
    return StepTime(
        compute_s=compute,
        comm_s=dp_s + critical,
        exposed_comm_s=exposed,
        critical_comm_s=critical,
        bubble=bubble,
        step_s=step,
        tokens_per_second=tokens / step if step > 0 else 0.0,
        mfu=mfu,
        peak_flops=peak_flops,
    )
