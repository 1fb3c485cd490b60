"""LoRA and QLoRA: trainable low-rank adapters on a frozen base.

    adapter params per adapted linear = r × (in + out)       (Hu et al. 2021, §4.1: W + B·A,
                                                               A ∈ ℝ^{r×in}, B ∈ ℝ^{out×r})

Only the adapters are trained, so only they carry gradients, a master copy and optimizer states
(the recipe's bytes per parameter); the base keeps its weights alone, in bf16 for LoRA or in
4-bit NF4 with double-quantised scales for QLoRA (Dettmers et al. 2023, §3: 4 + 8/64 + 32/(64·256)
bits per packed weight; embeddings, norms and the LM head stay 16-bit, as bitsandbytes leaves
them). Module names are those PEFT's `target_modules` matches in `transformers`' models.

PEFT's `modules_to_save` (peft/utils/other.py ModulesToSaveWrapper) keeps the original module
frozen and trains a full copy of it: the embedding or LM head named there adds its parameters
to the trainable ones (weights, gradients, optimizer states) on top of the base that keeps the
original.
"""

from __future__ import annotations

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.frozen import record
from gpuplan.errors import GpuplanError

ALL_LINEAR = "all-linear"


@record
class LoraSpec:
    """Rank, target modules and how the frozen base is stored."""

    rank: int
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    quantized: bool = False  # QLoRA: NF4 base with double quantisation
    saved: tuple[str, ...] = ()  # PEFT modules_to_save: embed_tokens / lm_head trained in full


def linear_shapes(arch: Architecture, layer: LayerSpec) -> dict[str, list[tuple[int, int]]]:
    """(in, out) of each linear module of one layer, by the name PEFT targets.

    Routed experts list one entry per expert (PEFT's target_parameters on fused experts).
    """
    a, h = arch.attention, arch.hidden_size
    out: dict[str, list[tuple[int, int]]] = {}
    if arch.model_type == "gpt2":
        inner = arch.mlp.intermediate_size if arch.mlp else 4 * h
        out["c_attn"] = [(h, 3 * h)]
        out["c_proj"] = [(h, h), (inner, h)]  # attn.c_proj and mlp.c_proj share the name
        out["c_fc"] = [(h, inner)]
        return out
    if a.is_mla:
        assert a.kv_lora_rank is not None
        q_out = a.num_heads * a.head_dim
        if a.q_lora_rank:
            out["q_a_proj"] = [(h, a.q_lora_rank)]
            out["q_b_proj"] = [(a.q_lora_rank, q_out)]
        else:
            out["q_proj"] = [(h, q_out)]
        out["kv_a_proj_with_mqa"] = [(h, a.kv_lora_rank + a.qk_rope_head_dim)]
        out["kv_b_proj"] = [(a.kv_lora_rank, a.num_heads * (a.qk_nope_head_dim + a.v_head_dim))]
    else:
        out["q_proj"] = [(h, a.num_heads * a.head_dim)]
        out["k_proj"] = [(h, a.num_kv_heads * a.head_dim)]
        out["v_proj"] = [(h, a.num_kv_heads * a.v_head_dim)]
    out["o_proj"] = [(a.num_heads * a.v_head_dim, h)]
    if layer.moe and arch.moe is not None:
        m = arch.moe
        i = m.expert_intermediate_size
        out["gate_proj"] = [(h, i)] * m.num_experts
        out["up_proj"] = [(h, i)] * m.num_experts
        out["down_proj"] = [(i, h)] * m.num_experts
        if m.shared_intermediate_size:
            s = m.shared_intermediate_size
            out["gate_proj"] = out["gate_proj"] + [(h, s)]
            out["up_proj"] = out["up_proj"] + [(h, s)]
            out["down_proj"] = out["down_proj"] + [(s, h)]
    elif arch.mlp is not None:
        i = arch.mlp.intermediate_size
        out["gate_proj"] = [(h, i)]
        out["up_proj"] = [(h, i)]
        out["down_proj"] = [(i, h)]
    return out


def default_targets(arch: Architecture) -> tuple[str, ...]:
    """The attention projections of the family (PEFT's defaults for Llama, GPT-2, DeepSeek)."""
    names = module_names(arch)
    return tuple(
        n for n in names if n not in ("gate_proj", "up_proj", "down_proj", "c_fc", "c_proj")
    )


def module_names(arch: Architecture) -> list[str]:
    """Every linear module name in the model's layers, in first-seen order (PEFT's all-linear)."""
    names: dict[str, None] = {}
    for layer in {*arch.layers}:
        names.update(dict.fromkeys(linear_shapes(arch, layer)))
    return list(names)


def resolve_targets(arch: Architecture, targets: tuple[str, ...]) -> tuple[str, ...]:
    """Expand 'all-linear' and reject names the model does not have."""
    known = module_names(arch)
    if ALL_LINEAR in targets:
        return tuple(known)
    missing = [t for t in targets if t not in known]
    if missing:
        verb = "is not a linear module" if len(missing) == 1 else "are not linear modules"
        raise GpuplanError(
            f"LoRA target {', '.join(repr(m) for m in missing)} {verb} of"
            f" {arch.name}; it has {', '.join(known)} (or use all-linear)"
        )
    return targets


def lora_layer_params(arch: Architecture, layer: LayerSpec, spec: LoraSpec) -> int:
    """Adapter parameters in one layer: Σ over adapted modules of r × (in + out)."""
    shapes = linear_shapes(arch, layer)
    return sum(spec.rank * (i + o) for name in spec.targets for (i, o) in shapes.get(name, []))


def lora_modules_per_layer(arch: Architecture, spec: LoraSpec) -> int:
    """Adapted linear modules per (first) layer: each saves a T × r lora_A output."""
    shapes = linear_shapes(arch, arch.layers[0])
    return sum(len(shapes.get(name, [])) for name in spec.targets)


SAVED = ("embed_tokens", "lm_head")


def saved_params(spec: LoraSpec, embedding: int, lm_head: int) -> int:
    """Parameters of the full copies PEFT trains for `modules_to_save`, given the embedding and
    LM head parameters held (a stage's, or the model's)."""
    return (embedding if "embed_tokens" in spec.saved else 0) + (
        lm_head if "lm_head" in spec.saved else 0
    )


def lora_params(arch: Architecture, spec: LoraSpec, layers: range | None = None) -> int:
    """Adapter parameters over `layers` (all layers by default)."""
    if spec.rank < 1:
        raise GpuplanError(f"LoRA rank must be at least 1, got {spec.rank}")
    chosen = range(arch.num_layers) if layers is None else layers
    per_kind: dict[LayerSpec, int] = {}
    total = 0
    for i in chosen:
        layer = arch.layers[i]
        if layer not in per_kind:
            per_kind[layer] = lora_layer_params(arch, layer, spec)
        total += per_kind[layer]
    return total


def paged_share(arch: Architecture, spec: LoraSpec, threshold: int, layers: range) -> float:
    """The share of the adapter parameters over `layers` held in tensors of at least
    `threshold` elements: lora_A (r × in) and lora_B (out × r) are separate tensors, and
    bitsandbytes pages only state tensors of ≥ 1e5 elements (Optimizer8bit.get_state_buffer)."""
    big = total = 0
    for i in layers:
        shapes = linear_shapes(arch, arch.layers[i])
        for name in spec.targets:
            for fan_in, fan_out in shapes.get(name, []):
                for n in (spec.rank * fan_in, spec.rank * fan_out):
                    total += n
                    big += n if n >= threshold else 0
    return big / total if total else 0.0
