"""vLLM's KV-cache layout: layer specs → page size → KV cache groups → blocks and tokens.

Mirrors vllm/v1/core/kv_cache_utils.py (get_kv_cache_groups, _get_kv_cache_groups_uniform_page_size,
get_num_blocks, _report_kv_cache_config, get_max_concurrency_for_kv_cache_config) and
vllm/v1/kv_cache_interface.py (FullAttentionSpec / SlidingWindowSpec / MLAAttentionSpec / MambaSpec
page sizes), read at v0.19 (docs/engines-research.md §1.2–1.4, §7). The V0 engine
(vllm/worker/cache_engine.py::get_cache_block_size) has one group of its attention layers, windows
ignored; its state layers live in a separate cache (bill.py).

Hybrid models (Mamba-1/2, gated DeltaNet, lightning attention, short convolutions beside attention):
every state layer is a MambaSpec whose page is one sequence's whole state (conv + SSM tensors,
model/mamba_utils.py MambaStateShapeCalculator; engine/state_cache.py gives the shapes). The
KV cache manager needs one page size for all layers, so (platforms/interface.py::
_align_hybrid_block_size from 0.19; model_executor/models/config.py::
HybridAttentionMambaModelConfig.verify_and_update_config in 0.10.2–0.18):

    attention block = a × ceil(state page / (a × attention bytes per token))   a = 16 (kernel
                      alignment; from 0.19 the larger of that and --block-size)
    state page      = padded to attention block × attention bytes per token

and groups are formed as for sliding windows: one spec per layer kind, group size = the smaller
count (or the larger when max < ratio × min). A state group holds one page per request
(mamba_cache_mode "none"; "align" keeps two, "all" one per block of the context).

Attention layers of different shapes (Gemma 4's global layers: global_head_dim 512 and their own
KV heads beside 256-wide sliding layers) are different specs with different pages; vLLM
(kv_cache_utils.py::unify_kv_cache_spec_page_size) raises each smaller spec's block size by
max page ÷ its page (refusing a page that does not divide the largest), so every group keeps one
page size but groups differ in tokens per block: the logged token count uses the smallest block
size over the groups, and a request's blocks are counted with each group's own block size.
Layers that share an earlier layer's KV (num_kv_shared_layers: kv_sharing_target_layer_name in
gpu_model_runner.py::get_kv_cache_spec) get no spec at all.
"""

from __future__ import annotations

import math

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.frozen import record
from gpuplan.engine.precision import Precision
from gpuplan.engine.profiles import EngineLaunch
from gpuplan.engine.profiles.common import kv_bytes_per_token_layer
from gpuplan.engine.state_cache import FP32, layer_state_shape
from gpuplan.errors import GpuplanError

KERNEL_ALIGN = 16  # FlashAttention / FlashInfer / Triton kernels take blocks in multiples of 16
STATE = "state"


@record
class KvLayout:
    """How the KV cache of one worker is cut: page bytes, layer slots, groups."""

    page_bytes: int  # one block of one layer slot (state pages padded to it)
    slots: int  # layer slots per block (uniform: layers; hybrid: group size)
    groups: int
    group_kinds: tuple[tuple[str, int | None], ...]  # (full | sliding | state, window)
    padding_layers: int = 0
    block_size: int = 16  # attention tokens per block (raised for hybrid state models)
    state_page_bytes: int = 0  # one state layer's state for one sequence, before padding
    state_layers: int = 0  # state layers in the model
    attention_layers: int = 0  # attention layers that keep a KV cache
    state_mode: str = "none"  # mamba_cache_mode: none | align | all
    state_block: int = 0  # tokens a state block stands for (max_model_len when mode none)
    group_blocks: tuple[int, ...] = ()  # each group's tokens per block (after page unification)

    def block_of(self, group: int) -> int:
        """Tokens per block of group `group` (attention groups of a smaller spec hold more)."""
        return self.group_blocks[group] if self.group_blocks else self.block_size

    @property
    def has_state(self) -> bool:
        return self.state_layers > 0


@record
class StateFormat:
    """The dtypes of a state page: conv state and SSM / recurrent state."""

    conv: Precision
    ssm: Precision


def state_page_bytes(arch: Architecture, fmt: StateFormat, tp: int) -> int:
    """MambaSpec.page_size_bytes: one sequence's state of one state layer on one TP rank (all of
    a model's state layers share one shape; a parallel attention + Mamba layer counts its Mamba)."""
    for layer, _n in arch.layer_groups():
        shape = layer_state_shape(arch, layer, tp, "engine")
        if shape is not None:
            return fmt.conv.bytes_for(shape.conv_elements) + fmt.ssm.bytes_for(shape.ssm_elements)
    return 0


def hybrid_block_size(
    attn_token_bytes: int, state_bytes: int, block_size: int, align_to_block: bool
) -> int:
    """The attention block size vLLM settles on for a hybrid model: the smallest multiple of the
    kernel alignment whose page holds one state page, never below --block-size (0.19:
    the alignment itself is max(16, --block-size))."""
    align = max(KERNEL_ALIGN, block_size) if align_to_block else KERNEL_ALIGN
    needed = align * math.ceil(state_bytes / (align * attn_token_bytes))
    return max(block_size, needed)


def layer_token_bytes(arch: Architecture, layer: LayerSpec, kv: Precision, tp: int) -> int:
    """One token's K and V in one attention layer of one rank, by the layer's own attention
    shape where it has one (AttentionSpec.page_size_bytes / block_size: 2 × KV heads ×
    head size × dtype bytes; vLLM keeps V even where the model computes V = K)."""
    spec = layer.attention
    if spec is None or spec.is_mla:
        return int(kv_bytes_per_token_layer(arch, kv, tp))
    heads = max(1, spec.num_kv_heads // tp)
    return int(heads * (spec.head_dim + spec.v_head_dim) * kv.bytes_for(1024) / 1024)


Kind = tuple[str, int | None, int]  # (full | sliding | state, window, attention bytes per token)


def _layer_kinds(
    arch: Architecture, hybrid: bool, paged_state: bool, kv: Precision, tp: int
) -> list[Kind]:
    """One spec per cache-keeping layer, in model order: attention layers (full, or sliding with
    their window when the hybrid manager is on, with their own bytes per token when the hybrid
    manager is on) and, when states are paged, the state layers (a parallel attention + Mamba
    layer gives both; KV-sharing layers give none)."""
    uniform = int(kv_bytes_per_token_layer(arch, kv, tp))
    kinds: list[Kind] = []
    for layer in arch.layers:
        if layer.has_attention and not layer.kv_shared:
            w = layer.sliding_window
            size = layer_token_bytes(arch, layer, kv, tp) if hybrid else uniform
            kinds.append(("full", None, size) if w is None or not hybrid else ("sliding", w, size))
        if layer.has_state and paged_state:
            kinds.append((STATE, None, 0))
    return kinds


def unified_blocks(kinds: list[Kind], block_size: int) -> tuple[int, dict[Kind, int]]:
    """unify_kv_cache_spec_page_size: the largest attention page, and each spec's block size
    raised so its page equals it (a page that does not divide the largest is refused)."""
    sizes = {k: k[2] for k in kinds if k[0] != STATE}
    page = block_size * max(sizes.values())
    blocks = {}
    for kind, size in sizes.items():
        if page % (block_size * size):
            raise GpuplanError(
                "vLLM cannot unify this model's KV page sizes (kv_cache_utils.py::"
                "unify_kv_cache_spec_page_size: a page does not divide the largest)"
            )
        blocks[kind] = page // size
    return page, blocks


def kv_layout(
    arch: Architecture,
    launch: EngineLaunch,
    block_size: int,
    layers: range,
    *,
    hybrid: bool = True,
    group_ratio: float = 1.5,
    paged_state: bool = True,
    state_format: StateFormat | None = None,
    align_to_block: bool = True,
    max_model_len: int = 0,
    state_mode: str = "none",
    mla_align: int = 1,
) -> KvLayout:
    """kv_cache_utils.py::get_kv_cache_groups: one group when every layer has the same spec;
    else layers bucketed by spec (full, each sliding window, state), group_size = the smallest
    bucket (or the largest if max < group_ratio × min: 1.25 before #36684, 1.5 after), each
    bucket cut into ceil(n / group_size) groups, bucket[i::groups] in group i. `layers` are the
    worker's (a pipeline stage): its slots are the most layers any group has on it.
    `hybrid=False` (V0, --disable-hybrid-kv-cache-manager, --disable-sliding-window) treats
    every attention layer as full attention; `paged_state=False` (V0) leaves state layers out.
    `mla_align` (V0, VLLM_MLA_CUDA_MEM_ALIGN_KV_CACHE): an MLA token entry rounded up to that
    many bytes (worker/cache_engine.py: align_to_256bytes)."""
    kinds = _layer_kinds(arch, hybrid, paged_state, launch.kv, launch.tp)
    attn_token = int(kv_bytes_per_token_layer(arch, launch.kv, launch.tp))
    if mla_align > 1 and arch.attention.is_mla:
        attn_token = -(-attn_token // mla_align) * mla_align
        kinds = [(k[0], k[1], -(-k[2] // mla_align) * mla_align if k[2] else 0) for k in kinds]
    fmt = state_format or StateFormat(launch.weights.base, launch.weights.base)
    state = state_page_bytes(arch, fmt, launch.tp) if paged_state else 0
    n_state = sum(1 for k in kinds if k[0] == STATE)
    n_attn = len(kinds) - n_state
    if not hybrid and n_state and n_attn:
        raise GpuplanError(
            "vLLM refuses --disable-hybrid-kv-cache-manager for a model with state layers"
            " (kv_cache_utils.py::unify_hybrid_kv_cache_specs cannot turn a MambaSpec into"
            " full attention)"
        )
    if not kinds:
        return KvLayout(0, 0, 0, (), block_size=block_size)
    state_block = max_model_len if state_mode == "none" else block_size
    spec_blocks: dict[Kind, int] = {}
    if n_state and not n_attn:  # a state-only model: pages are states, blocks are requests
        page = state
        block_size = state_block = max_model_len or block_size
    elif n_state:
        kinds = [(k[0], k[1], attn_token if k[0] != STATE else 0) for k in kinds]
        block_size = hybrid_block_size(attn_token, state, block_size, align_to_block)
        state_block = max_model_len if state_mode == "none" else block_size
        page = block_size * attn_token
    else:
        page, spec_blocks = unified_blocks(kinds, block_size)
        block_size = min(spec_blocks.values())
    owner, local = _kind_owners(arch, hybrid, paged_state), set(layers)
    on_worker = [owner[i] in local for i in range(len(kinds))]
    group_kinds, group_blocks, slots, padding = _groups(
        kinds, group_ratio, on_worker, spec_blocks, block_size
    )
    return KvLayout(
        page,
        slots,
        len(group_kinds),
        tuple(group_kinds),
        padding,
        block_size,
        state,
        n_state,
        n_attn,
        state_mode,
        state_block,
        tuple(group_blocks) if spec_blocks else (),
    )


def _groups(
    kinds: list[Kind],
    group_ratio: float,
    local: list[bool],
    spec_blocks: dict[Kind, int],
    block_size: int,
) -> tuple[list[tuple[str, int | None]], list[int], int, int]:
    """get_kv_cache_groups' grouping: layers bucketed by spec, group_size the smallest bucket
    (the largest when max < group_ratio × min), each bucket cut into ceil(n / group_size) groups
    taking bucket[i::groups]. Returns (each group's kind, its block size, the most of a group's
    layers on this worker, the padding slots)."""
    buckets: dict[Kind, list[int]] = {}
    for i, kind in enumerate(kinds):
        buckets.setdefault(kind, []).append(i)
    counts = sorted(len(v) for v in buckets.values())
    group = counts[0] if counts[-1] >= group_ratio * counts[0] else counts[-1]
    if len(buckets) == 1:
        group = counts[0]
    group_kinds: list[tuple[str, int | None]] = []
    group_blocks: list[int] = []
    slots = 0
    for kind, members in sorted(buckets.items(), key=lambda kv: kv[0][0]):
        n_groups = math.ceil(len(members) / group)
        for g in range(n_groups):
            group_kinds.append(kind[:2])
            group_blocks.append(spec_blocks.get(kind, block_size))
            slots = max(slots, sum(1 for m in members[g::n_groups] if local[m]))
    return group_kinds, group_blocks, slots, group * len(group_kinds) - len(kinds)


def _kind_owners(arch: Architecture, hybrid: bool, paged_state: bool) -> list[int]:
    """The decoder layer each spec of `_layer_kinds` belongs to (its pipeline stage)."""
    owners: list[int] = []
    for i, layer in enumerate(arch.layers):
        if layer.has_attention and not layer.kv_shared:
            owners.append(i)
        if layer.has_state and paged_state:
            owners.append(i)
    return owners


def blocks_per_request(
    layout: KvLayout, max_model_len: int, block_size: int, batched_tokens: int
) -> int:
    """Blocks (of one layer slot) one max_model_len request needs, summed over the groups:
    full attention ceil(L / bs); a sliding window (SlidingWindowSpec.max_memory_usage_bytes)
    ceil(min(window − 1 + max_num_batched_tokens, L) / bs) + 1; a state group
    (MambaSpec.max_memory_usage_bytes) one page, two in mamba_cache_mode "align", one per
    block of the context in "all"."""
    n = 0
    for i, (kind, window) in enumerate(layout.group_kinds):
        bs = layout.group_blocks[i] if layout.group_blocks else block_size
        if kind == STATE:
            n += {"none": 1, "align": 2}.get(layout.state_mode, math.ceil(max_model_len / bs))
        elif kind == "sliding" and window:
            n += math.ceil(min(window - 1 + batched_tokens, max_model_len) / bs) + 1
        else:
            n += math.ceil(max_model_len / bs)
    return n


def num_blocks(available: int, layout: KvLayout) -> int:
    """get_num_blocks: available // page // layer slots (0 without any cache layer)."""
    if not layout.page_bytes or not layout.slots:
        return 0
    return max(0, available) // layout.page_bytes // layout.slots


def tokens_for(
    available: int,
    layout: KvLayout,
    block_size: int,
    report: str = "blocks",
    max_model_len: int = 0,
    batched_tokens: int = 0,
) -> int:
    """The "GPU KV cache size" vLLM logs for `available` bytes (_report_kv_cache_config): until
    0.20 blocks // groups × the smallest block size over the groups (a state group's block
    stands for max_model_len tokens); from 0.21 (#41069) max concurrency × max_model_len."""
    blocks = num_blocks(available, layout)
    return reported_tokens(layout, blocks, block_size, report, max_model_len, batched_tokens)


def reported_tokens(
    layout: KvLayout,
    blocks: int,
    block_size: int,
    report: str = "blocks",
    max_model_len: int = 0,
    batched_tokens: int = 0,
) -> int:
    if not layout.groups:
        return 0
    if report == "concurrency" and max_model_len:
        per_request = blocks_per_request(layout, max_model_len, block_size, batched_tokens)
        return int(blocks / per_request * max_model_len) if per_request else 0
    smallest = min(layout.group_blocks) if layout.group_blocks else block_size
    if layout.has_state and layout.state_block:
        smallest = min(smallest, layout.state_block)
    return blocks // layout.groups * smallest


def resolve_state_format(
    arch: Architecture,
    model_dtype: Precision,
    conv_flag: str | None,
    ssm_flag: str | None,
    honoured: tuple[str, ...],
    default_fp32: tuple[str, ...],
) -> StateFormat:
    """The dtypes of a state page (model/mamba_utils.py MambaStateDtypeCalculator): the conv
    state in --mamba-cache-dtype (auto = the model dtype), the SSM state in
    --mamba-ssm-cache-dtype, else — for the model types the version honours it for — the
    checkpoint's own mamba_ssm_cache_dtype / mamba_ssm_dtype (NemotronH from 0.13, #29978, fp32
    when absent from 0.20, #39032; Qwen3.5 from 0.16, #34489), else the conv state's."""
    conv = _dtype(conv_flag) or model_dtype
    ssm = _dtype(ssm_flag)
    if ssm is None and arch.model_type in honoured:
        ssm = _dtype(arch.ssm_state_dtype)
        if ssm is None and arch.model_type in default_fp32:
            ssm = FP32
    return StateFormat(conv, ssm or conv)


_STATE_DTYPES = {
    "float32": FP32,
    "fp32": FP32,
    "torch.float32": FP32,
    "bfloat16": Precision(id="bf16", bits=16),
    "float16": Precision(id="fp16", bits=16),
}


def _dtype(name: str | None) -> Precision | None:
    if not name or name == "auto":
        return None
    return _STATE_DTYPES.get(str(name).lower())
