"""Model states per GPU: weights, gradients, fp32 master copy, optimizer states, and the
transient communication buffers that come with sharding them.

    model states = Ψ × (weights + gradients + master + optimizer) bytes        (ZeRO §3.1)

Ψ is the parameters one GPU holds after tensor, pipeline and expert parallelism (the heaviest
pipeline stage: its layers ÷ tp, plus the embedding on the first stage and the LM head on the
last, as engine/weights.py lays them out; experts further ÷ ep). ZeRO then divides each state
by the ranks it is sharded over (engine/sharding.py): stage ≥ 1 the master and optimizer
states, ≥ 2 the gradients, 3 the weights (Rajbhandari et al. 2020, §5.1-5.3, Figure 1).
Each rank holds ⌈Ψ ÷ d⌉ (DeepSpeed pads the flat buffer to a multiple of d).

Transient buffers (what makes a run whose states fit go out of memory):
  * ZeRO-3 / FSDP FULL_SHARD gathers a whole unit (a decoder layer, or the embedding / LM head)
    before using it and prefetches the next one: 2 × the largest unit in the weight dtype
    (FSDP's forward/backward prefetch, Zhao et al. 2023 §3.3), and holds one unit's unsharded
    gradient until its reduce-scatter (grad dtype).
  * FSDP SHARD_GRAD_OP likewise holds one unit's unsharded gradient.
  * DeepSpeed ZeRO 0-2 reduce gradients through a bucket of reduce_bucket_size = 5e8 elements
    and, for stages 1-2, all-gather updated weights through allgather_bucket_size = 5e8
    elements (DeepSpeed config defaults), capped at the parameters held.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.engine.architecture import Architecture, LayerSpec
from gpuplan.engine.encoder_decoder import factored_elements
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.params import count_params, expert_params, layer_params
from gpuplan.engine.precision import Precision
from gpuplan.engine.recipes import TrainingRecipe
from gpuplan.engine.sharding import Layout
from gpuplan.engine.weights import WeightFormat, layer_bytes_per_rank, stage_layers
from gpuplan.units import ceil_div

ONE_BYTE = Precision(id="count", bits=8)  # a format whose bytes are the element count
COUNT = WeightFormat(ONE_BYTE, ONE_BYTE)
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000  # reduce_bucket_size / allgather_bucket_size defaults


@record(cache_hash=True)
class StageParams:
    """Parameters on the heaviest GPU after tp/pp/ep: dense, experts, and the largest unit."""

    stage: int
    layers: range
    dense: int  # non-expert parameters on this GPU
    experts: int  # routed-expert parameters on this GPU (already ÷ ep)
    largest_unit: int  # parameters of the largest FSDP unit on this GPU (layer, embedding, head)
    embedding: int
    lm_head: int

    @property
    def total(self) -> int:
        return self.dense + self.experts


def layer_params_per_rank(
    arch: Architecture, index: int, tp: int, ep: int = 1, etp: int = 0
) -> tuple[int, int]:
    """(all parameters, those of the MLP's last linear) of layer `index` on one GPU after tp
    and ep (experts split etp ways when set, else tp): the unit whose gradients a layer's
    backward builds, and the first it builds."""
    return _kind_params_per_rank(arch, layer_kind_index(arch)[1][index], tp, ep, etp or tp)


@lru_cache(maxsize=4096)
def _kind_params_per_rank(
    arch: Architecture, kind: int, tp: int, ep: int, etp: int
) -> tuple[int, int]:
    """`layer_params_per_rank` by the layer's kind (`layer_kind_index`): layers of one kind
    weigh the same."""
    index = layer_kind_index(arch)[1].index(kind)  # the first layer of that kind
    layer = arch.layers[index]
    total = layer_bytes_per_rank(arch, index, COUNT, tp)
    h = arch.hidden_size
    if layer.moe and arch.moe is not None:
        m = arch.moe
        counted = round(m.num_experts * expert_params(arch) / tp)  # as split by tp above
        experts = round(m.num_experts * expert_params(arch) / etp)
        total -= counted - ceil_div(experts, ep)
        down = ceil_div(m.num_experts, ep) * m.expert_intermediate_size * h // etp
        return total, down
    down = arch.mlp.intermediate_size * h // tp if arch.mlp is not None else 0
    return total, down


@lru_cache(maxsize=256)
def layer_kind_index(arch: Architecture) -> tuple[tuple[LayerSpec, ...], tuple[int, ...]]:
    """The distinct layer kinds of `arch` in order of first appearance, and each layer's place
    among them: a stage's sums then index a list instead of hashing and comparing a LayerSpec
    (a wide dataclass) once per layer per layout."""
    kinds: dict[LayerSpec, int] = {}
    index = tuple(kinds.setdefault(layer, len(kinds)) for layer in arch.layers)
    return tuple(kinds), index


@lru_cache(maxsize=4096)
def stage_param_list(
    arch: Architecture, tp: int, pp: int, ep: int = 1, etp: int = 0
) -> tuple[StageParams, ...]:
    """Ψ on one GPU of each pipeline stage: its layers ÷ tp (experts ÷ etp when set, else tp,
    and further ÷ ep), the token embedding on the first stage, the final norm and LM head on the
    last (a tied embedding gets a second copy there when pp > 1), laid out as engine/weights.py
    does for serving."""
    counts = count_params(arch)
    h = arch.hidden_size
    emb = round(counts.embedding / tp)
    head_params = 0 if arch.tie_word_embeddings else arch.vocab_size * h
    head = round(head_params / tp) + (counts.lm_head - head_params)
    if arch.tie_word_embeddings and pp > 1:
        head += round(arch.vocab_size * h / tp)
    experts_tp = (
        round(arch.moe.num_experts * expert_params(arch) / tp) if arch.moe is not None else 0
    )
    experts_etp = (
        round(arch.moe.num_experts * expert_params(arch) / (etp or tp))
        if arch.moe is not None
        else 0
    )
    kinds, index = layer_kind_index(arch)
    dense_of, experts_of = [], []  # per layer kind: (dense part, expert part) on one GPU
    for k, layer in enumerate(kinds):
        total = layer_bytes_per_rank(arch, index.index(k), COUNT, tp)
        moe = layer.moe and layer.ffn
        dense_of.append(total - (experts_tp if moe else 0))
        experts_of.append(ceil_div(experts_etp, ep) if moe else 0)
    out = []
    for s, layers in enumerate(stage_layers(arch.num_layers, pp)):
        in_stage = index[layers.start : layers.stop]
        dense = sum(dense_of[k] for k in in_stage)
        experts = sum(experts_of[k] for k in in_stage)
        e = emb if s == 0 else 0
        lm = head if s == pp - 1 else 0
        unit = max([e, lm] + [dense_of[k] + experts_of[k] for k in set(in_stage)])
        out.append(StageParams(s, layers, dense + e + lm, experts, unit, e, lm))
    return tuple(out)


def factored_moment_params(arch: Architecture, layers: range, tp: int) -> int:
    """Elements of Adafactor's factored second moment on one GPU (Shazeer & Stern 2018, §3).

    An n × m matrix keeps a row and a column accumulator, n + m values; vectors (norms,
    biases) keep a full second moment. Matrices are taken per projection (q, k, v, o; gate,
    up, down; per expert), ÷ tp; embedding and LM head count V + h each.
    """
    if arch.encoder is not None:  # both stacks, from the record (engine/encoder_decoder.py)
        return ceil_div(factored_elements(arch.encoder, arch.vocab_size, arch.num_layers), tp)
    a, h = arch.attention, arch.hidden_size
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    attn = (h + q) + 2 * (h + kv) + (a.num_heads * a.v_head_dim + h)
    total = 0
    for i in layers:
        layer = arch.layers[i]
        c = layer_params(arch, layer)
        total += attn + c.get("norm", 0) + c.get("bias", 0)
        if layer.moe and arch.moe is not None:
            m = arch.moe
            total += m.num_experts * 3 * (h + m.expert_intermediate_size) + (h + m.num_experts)
            if m.shared_intermediate_size:
                total += 3 * (h + m.shared_intermediate_size)
        elif arch.mlp is not None:
            total += (3 if arch.mlp.gated else 2) * (h + arch.mlp.intermediate_size)
    total += 2 * (arch.vocab_size + h)
    return ceil_div(total, tp)


@record(cache_hash=True)
class ModelStates:
    """Bytes per GPU of each model state, and of the buffers sharding adds."""

    weights: int
    gradients: int
    master: int
    optimizer: int
    gather_buffer: int  # ZeRO-3/FSDP all-gathered units (prefetch included)
    grad_buffer: int  # reduce bucket or one unit's unsharded gradient
    allgather_bucket: int  # DeepSpeed ZeRO-1/2 weight all-gather bucket
    trainable: int  # trainable parameters on this GPU (before ZeRO)
    frozen: int  # frozen parameters on this GPU (LoRA base)
    optimizer_paged: int = 0  # of `optimizer`, the bytes in CUDA unified memory (paged states)

    @property
    def total(self) -> int:
        """weights + gradients + master + optimizer: the issue's `model_states_bytes`."""
        return self.weights + self.gradients + self.master + self.optimizer


def model_states(
    recipe: TrainingRecipe,
    layout: Layout,
    dense: int,
    experts: int = 0,
    largest_unit: int = 0,
    largest_unit_bytes: int | None = None,
    frozen_bytes: int = 0,
    frozen_params: int = 0,
    factored: int = 0,
    buckets: tuple[int, int] = (DEEPSPEED_BUCKET_ELEMENTS, DEEPSPEED_BUCKET_ELEMENTS),
) -> ModelStates:
    """Per-GPU model states of `dense` + `experts` trainable parameters under `layout`.

    ZeRO paper, §5.1 eq. for P_os: (2 + 2)Ψ + KΨ/N_d; P_os+g: 2Ψ + (2 + K)Ψ/N_d;
    P_os+g+p: (2 + 2 + K)Ψ/N_d. `frozen_bytes` are weights that are not trained (a LoRA base):
    they are sharded like weights under ZeRO-3 and have no gradient or optimizer state.
    `largest_unit` is the trainable parameters of the largest FSDP unit (its unsharded gradient),
    `largest_unit_bytes` its stored bytes when they are not the recipe's weight dtype (a 4-bit
    base). `factored` adds Adafactor's row/column accumulators (fp32) for recipes that factor.
    `buckets` are DeepSpeed's (reduce_bucket_size, allgather_bucket_size) in elements.
    """
    d, de = layout.shard_degree, layout.expert_shard_degree

    def held(fmt: Precision, stage: int) -> int:
        if layout.zero >= stage:
            return fmt.bytes_for(ceil_div(dense, d)) + fmt.bytes_for(ceil_div(experts, de))
        return fmt.bytes_for(dense) + fmt.bytes_for(experts)

    weights = held(recipe.weights, 3)
    base = ceil_div(frozen_bytes, d) if layout.zero >= 3 else frozen_bytes
    grads = held(recipe.grads, 2)
    master = held(recipe.master, 1) if recipe.master else 0
    states = sum(held(s.format, 1) for s in recipe.states)
    if recipe.factored and factored:
        states += 4 * (ceil_div(factored, d) if layout.zero >= 1 else factored)
    trainable = dense + experts
    gather = grad_buffer = allgather = 0
    if layout.dp * layout.cp == 1:
        pass  # nothing to gather or reduce on a single data-parallel rank
    elif layout.fsdp is not None or layout.zero == 3:
        if layout.zero == 3:
            unit = recipe.weights.bytes_for(largest_unit)
            gather = 2 * (unit if largest_unit_bytes is None else largest_unit_bytes)
        if layout.zero >= 2:
            grad_buffer = recipe.grads.bytes_for(largest_unit)
        elif trainable:
            grad_buffer = recipe.grads.bytes_for(min(trainable, buckets[0]))
    elif trainable:
        grad_buffer = recipe.grads.bytes_for(min(trainable, buckets[0]))
        if layout.zero in (1, 2) and layout.shard_degree > 1:
            allgather = recipe.weights.bytes_for(min(trainable, buckets[1]))
    return ModelStates(
        weights=weights + base,
        gradients=grads,
        master=master,
        optimizer=states,
        gather_buffer=gather,
        grad_buffer=grad_buffer,
        allgather_bucket=allgather,
        trainable=trainable,
        frozen=frozen_params,
    )


def held_recipe(
    recipe: TrainingRecipe, fsdp_fp32_params: bool, reduce_fp32: bool, zero: int
) -> TrainingRecipe:
    """The recipe as a framework stores it. FSDP2 with MixedPrecisionPolicy over fp32 parameters
    keeps one fp32 sharded parameter that is also the master, its gradient in the reduce dtype,
    and bf16 only in gathered units (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): the
    same 16 bytes per parameter as bf16 weights + fp32 master, split differently."""
    if not fsdp_fp32_params or recipe.master is None or zero != 3:
        return recipe
    grads = recipe.master if reduce_fp32 else recipe.grads
    return replace(recipe, weights=recipe.master, grads=grads, master=None)
