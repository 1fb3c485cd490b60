"""How a training job is laid out over GPUs, and what each kind of parallelism divides.

    GPUs = dp × cp × tp × pp                      (Megatron-LM's rank grid; ep is carved out of dp)

An interleaved pipeline (vpp > 1) gives each of the pp ranks vpp model chunks of
layers ÷ (pp × vpp) layers: virtual stage c·pp + r on rank r (Narayanan et al. 2021 §2.2.2).

ZeRO (Rajbhandari et al. 2020, §5, Figure 1) shards over the data-parallel ranks:
    stage 1 (P_os)      optimizer states and fp32 master ÷ dp
    stage 2 (P_os+g)    + gradients ÷ dp
    stage 3 (P_os+g+p)  + weights ÷ dp
PyTorch FSDP (Zhao et al. 2023, §3.2) names the same points: FULL_SHARD = ZeRO-3,
SHARD_GRAD_OP = ZeRO-2, NO_SHARD = ZeRO-0, HYBRID_SHARD = ZeRO-3 within a node (sharded over
the node's data-parallel ranks, replicated across nodes), _HYBRID_SHARD_ZERO2 likewise for ZeRO-2.

Megatron-LM shards its distributed optimizer over the data-parallel *and* context-parallel ranks
(they hold the same parameters), so the sharding degree here is dp × cp. Expert parameters
are split ep ways and then sharded over the dp × cp ÷ ep ranks that hold the same experts
(Megatron-core's expert-data-parallel group). With expert tensor parallelism apart from tp
(--expert-tensor-parallel-size etp, Megatron-core 0.10+) the experts are split etp ways instead
of tp, ep × etp ranks span dp × cp × tp (expert parallelism may cross the tensor-parallel
ranks), and their expert-data-parallel group is dp × cp × tp ÷ (etp × ep).
"""

from __future__ import annotations

from math import gcd

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError

FSDP_MODES = {
    "no_shard": (0, False),
    "shard_grad_op": (2, False),
    "full_shard": (3, False),
    "hybrid_shard": (3, True),
    "hybrid_shard_zero2": (2, True),
}


@record(cache_hash=True)
class Layout:
    """A training layout: parallel degrees, ZeRO stage, and where the sharding stops."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False  # Megatron sequence parallelism (needs tp > 1 to divide anything)
    zero: int = 0
    fsdp: str | None = None  # an FSDP sharding strategy (sets `zero`), or None
    hybrid: bool = False  # shard within a node only (FSDP HYBRID_SHARD)
    gpus_per_node: int = 8
    vpp: int = 1  # virtual pipeline stages (model chunks) per pipeline rank: interleaved 1F1B
    etp: int = 0  # expert tensor parallelism (Megatron --expert-tensor-parallel-size); 0: = tp

    @property
    def gpus(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def shard_degree(self) -> int:
        """Ranks the ZeRO/FSDP shards are spread over: dp × cp, or only those in one node."""
        ranks = self.dp * self.cp
        if self.hybrid:
            in_node = max(1, self.gpus_per_node // (self.tp * self.cp))
            return gcd(self.dp, in_node) * self.cp
        return ranks

    @property
    def expert_tp(self) -> int:
        """The tensor-parallel degree of the experts: etp, or tp when not set."""
        return self.etp or self.tp

    @property
    def expert_shard_degree(self) -> int:
        """Ranks that hold the same experts and shard their states: dp × cp ÷ ep; with expert
        tensor parallelism apart from tp, the expert-data-parallel group of Megatron-core,
        dp × cp × tp ÷ (etp × ep) (parallel_state.py: experts are laid out over the same
        ranks as dp × cp × tp)."""
        if self.expert_tp == self.tp:
            return max(1, self.shard_degree // self.ep)
        return max(1, self.shard_degree * self.tp // (self.expert_tp * self.ep))

    def describe(self) -> str:
        parts = [f"dp={self.dp}", f"tp={self.tp}", f"pp={self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp={self.vpp}")
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.expert_tp != self.tp:
            parts.append(f"etp={self.expert_tp}")
        if self.sp:
            parts.append("sp")
        parts.append(f"FSDP {self.fsdp.upper()}" if self.fsdp else f"ZeRO-{self.zero}")
        return " ".join(parts)


def fsdp_layout(mode: str) -> tuple[int, bool]:
    """(ZeRO stage, hybrid) for an FSDP sharding strategy name."""
    key = mode.strip().lower().replace("-", "_")
    if key not in FSDP_MODES:
        raise GpuplanError(
            f"unknown FSDP mode {mode!r}; use one of {', '.join(m.upper() for m in FSDP_MODES)}"
        )
    return FSDP_MODES[key]


def tp_problem(arch: Architecture, tp: int) -> str | None:
    """Why `tp` cannot shard this model's attention, or None.

    Engines shard whole heads: tp must divide the attention heads, and the KV heads must split
    evenly (kv_heads % tp == 0) or be replicated evenly (tp % kv_heads == 0). vLLM's
    QKVParallelLinear and Megatron's attention assert the same; MLA has no KV heads to split.
    """
    a = arch.attention
    if a.num_heads % tp:
        return f"tp={tp} does not divide {a.num_heads} attention heads"
    kv = a.num_kv_heads
    if not a.is_mla and kv % tp and tp % kv:
        return f"tp={tp} and {kv} KV heads: neither divides the other"
    return None


def validate_layout(
    layout: Layout, num_heads: int, num_kv_heads: int, num_layers: int, num_experts: int
) -> None:
    """Reject layouts no framework can run, with a one-line reason."""
    for name in ("dp", "tp", "pp", "cp", "ep", "vpp"):
        value = getattr(layout, name)
        if isinstance(value, bool) or value < 1:
            raise GpuplanError(f"{name} must be at least 1, got {value}")
    if layout.zero not in (0, 1, 2, 3):
        raise GpuplanError(f"ZeRO stage must be 0, 1, 2 or 3, got {layout.zero}")
    if num_heads % layout.tp:
        raise GpuplanError(f"tp={layout.tp} does not divide the {num_heads} attention heads")
    if num_kv_heads % layout.tp and layout.tp % num_kv_heads:
        raise GpuplanError(f"tp={layout.tp} and {num_kv_heads} KV heads: neither divides the other")
    if layout.pp > num_layers:
        raise GpuplanError(f"pp={layout.pp} is larger than the {num_layers} layers")
    if layout.vpp > 1:
        if layout.pp == 1:
            raise GpuplanError(f"vpp={layout.vpp} interleaves pipeline stages: it needs pp > 1")
        if layout.pp * layout.vpp > num_layers:
            raise GpuplanError(
                f"pp={layout.pp} × vpp={layout.vpp} virtual stages exceed the {num_layers} layers"
            )
    if layout.ep > 1:
        if num_experts == 0:
            raise GpuplanError(f"ep={layout.ep} needs a mixture-of-experts model")
        if num_experts % layout.ep:
            raise GpuplanError(f"ep={layout.ep} does not divide the {num_experts} experts")
        if layout.expert_tp == layout.tp and (layout.dp * layout.cp) % layout.ep:
            raise GpuplanError(
                f"ep={layout.ep} must divide the data-parallel ranks dp×cp={layout.dp * layout.cp}"
                " (or give an expert tensor-parallel degree etp: ep × etp spans dp × cp × tp)"
            )
    if layout.etp < 0 or isinstance(layout.etp, bool):
        raise GpuplanError(f"etp must be at least 1, got {layout.etp}")
    if layout.expert_tp != layout.tp:
        if num_experts == 0:
            raise GpuplanError(f"etp={layout.etp} needs a mixture-of-experts model")
        ranks = layout.dp * layout.cp * layout.tp
        if ranks % (layout.ep * layout.expert_tp):
            raise GpuplanError(
                f"ep={layout.ep} × etp={layout.expert_tp} must divide dp×cp×tp={ranks}"
                " (Megatron lays the experts out over the same ranks)"
            )
    if layout.sp and layout.tp == 1:
        raise GpuplanError("sequence parallelism (--sp) splits activations over tp; set --tp > 1")
