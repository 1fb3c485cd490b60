"""llama.cpp (`llama-server`) memory accounting for a GGUF model: which layers and bytes sit on
each GPU, which stay in host RAM, and the KV cache every device holds.

Rules, each from the llama.cpp source (read at the 2025-2026 b6xxx-b7xxx releases):

    layers on GPU   i_gpu_start = max(n_layer + 1 − n_gpu_layers, 0); layer il (il = n_layer is
                    the output layer: output norm + LM head) is offloaded when il ≥ i_gpu_start;
                    the input layer (token embedding) always stays on the CPU
                    (src/llama-model.cpp, load_tensors / get_layer_buft_list)
    which GPU       split points = cumulative --tensor-split (default: equal for equal GPUs, by
                    free memory); layer → first GPU whose split point exceeds
                    (il − i_gpu_start) / act_gpu_layers (the same function)
    --split-mode    layer: whole layers per GPU (above); row: every offloaded matrix split
                    across GPUs by --tensor-split rows (the split buffer type heads each GPU's
                    buffer list, src/llama-model.cpp make_gpu_buft_list), the layer's KV cache
                    and small tensors on its own device as in layer mode (b5605's 4-GPU log,
                    llama.cpp#14075); builds before the backend-registry loader (~b4000) kept
                    them on --main-gpu; none: one GPU
    tied LM head    a GGUF without output.weight duplicates token_embd as the output tensor on
                    the output layer's device (TENSOR_DUPLICATED)
    context         n_ctx = --ctx-size or, at 0, the model's training context, padded: to 256
                    from PR #17046 (Nov 2025, about b7000; src/llama-context.cpp
                    GGML_PAD(n_ctx, 256), and per sequence GGML_PAD(n_ctx / n_seq, 256) when
                    the cache is not unified); before it to llama_kv_cache::get_padding (src/
                    llama-kv-cache.cpp: 256 with flash attention, else 32). Flash attention is
                    on by default (-fa auto) from about b6300, off before. The server's parallel
                    slots share those cells
    KV per layer    n_ctx × (row_size(type_k, n_embd_k_gqa) + row_size(type_v, n_embd_v_gqa)),
                    sliding-window layers min(n_ctx, pad(n_swa × slots + n_ubatch, 256)) cells
                    unless --swa-full (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp); on the
                    device of its layer, or in host RAM with --no-kv-offload
    row sizes       ggml block types: q8_0 = 34 bytes per 32 values, q4_0 = 18 per 32
                    (catalog/data/precisions.toml)

Weights are the GGUF's exact tensor bytes (catalog/sources/gguf_header.py). The compute
buffers are the peak of the worst-case graph ggml-backend's scheduler reserves (ggml-alloc reuses
a tensor's memory once its last consumer ran, so the buffer is the largest set of tensors alive
at once, not their sum), one n_ubatch-token graph over all n_ctx cells, all f32
(src/llama-context.cpp graph_reserve, ggml/src/ggml-alloc.c):
    output device   n_outputs × n_vocab logits + the n_ubatch × n_embd normed hidden state;
                    n_outputs = n_ubatch in builds before ~b7000, the sequences after (the
                    reserve graph keeps one output per sequence: logs of b10121)
    attention       without flash attention the n_head × n_ctx × n_ubatch scores (soft_max
                    runs in place) + the layer's q, k, v, output and residual rows; with it, the
                    device's copy of the n_kv × n_ubatch f32 mask is held as well, and a
                    quantized cache is cast to f16 (one layer's K and V over all cells)
    feed-forward    the n_ubatch × n_ff up and gate rows + the residual rows
    host            the n_ubatch × n_embd input embeddings and the n_ctx × n_ubatch mask (graph
                    inputs live in the CPU's buffer), and the logits when the output layer is there
A range is given: pipeline-parallel copies (several GPUs, n_copies) and backend kernels' scratch
are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplan.engine.architecture import Architecture
from gpuplan.engine.bill import LineItem
from gpuplan.engine.checkpoint import Checkpoint
from gpuplan.engine.frozen import record, replace
from gpuplan.engine.precision import Precision
from gpuplan.engine.profiles import EngineBill, EngineLaunch, Range, budget_item, gib
from gpuplan.engine.profiles.common import refuse_state_layers
from gpuplan.errors import GpuplanError

VERSION = "llama.cpp llama-server (rules read at releases b6xxx-b7xxx, 2025-2026)"
CTX_PAD = 256  # llama-context.cpp: cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)
DEFAULT_PARALLEL = 4  # llama-server: -np -1 (auto) → 4 slots with a unified KV cache
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
SPLIT_MODES = ("none", "layer", "row")
DEFAULT_UBATCH = 512  # common.h: n_ubatch
FIT_MARGIN = gib(1.0)  # common.h: fit_params_target, 1 GiB free per device
FIT_MIN_CTX = 4096  # common.h: fit_params_min_ctx
CUDA_CONTEXT = gib(0.35)  # CUDA context + cuBLAS handles per device (allowance, not measured here)
PAD_256_BUILD = 7000  # PR #17046 (Nov 2025): n_ctx padded to 256 in llama-context.cpp
FA_AUTO_BUILD = 6300  # about when -fa auto (on where supported) became the default
OLD_PADDING = (256, 32)  # llama_kv_cache::get_padding before PR #17046: with / without FA
ROW_LAYER_DEVICE_BUILD = 4000  # about when row split left each layer on its own device
FIT_BUILD = 7000  # about when -c 0 (the training context) and --fit became the defaults
OLD_DEFAULT_CTX = 4096  # common/common.h n_ctx between ~b4400 and FIT_BUILD (0 before it)
CTX_4096_BUILD = 4400  # about when common.h's default n_ctx went from 0 to 4096


# --------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------


@record
class LlamaCppOptions:
    """The llama-server settings that decide memory (llama.cpp's defaults where not given)."""

    ctx_size: int = 0
    n_parallel: int = DEFAULT_PARALLEL
    n_gpu_layers: int | None = None  # None: auto (fit to free memory)
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    ubatch_size: int = DEFAULT_UBATCH
    flash_attn: bool | None = None  # None: the build's default (auto = on from ~b6300)
    no_kv_offload: bool = False
    swa_full: bool = False
    gpus: int = 1
    kv_unified: bool = True  # -np auto (or 1): one stream; -np N: N streams unless --kv-unified
    build: int | None = None  # the llama.cpp build number whose rules apply (None: newest)

    @property
    def fa(self) -> bool:
        """Flash attention as the build runs it: the flag, else its default."""
        if self.flash_attn is not None:
            return self.flash_attn
        return self.build is None or self.build >= FA_AUTO_BUILD


def build_number(version: str | None) -> int | None:
    """'b4202' / '4202' → 4202; anything else (the adapter's newest) → None."""
    text = str(version or "").lower().lstrip("b")
    return int(text) if text.isdigit() and len(text) <= 6 else None


def options_from_args(
    args: Mapping[str, Any], gpus: int | None = None, version: str | None = None
) -> LlamaCppOptions:
    """llama-server's arguments (its own names) as settings, validated, defaults filled in."""
    changes: dict[str, Any] = {"build": build_number(version)}
    changes.update(_size_args(args))
    changes.update(_gpu_layers_arg(args))
    changes.update(_cache_type_args(args))
    changes.update(_split_args(args))
    changes.update(_switch_args(args))
    changes.update(_device_args(args, gpus, changes))
    return replace(LlamaCppOptions(), **changes)


def _size_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """-c, -np (-1: auto, 4 slots), --main-gpu and -ub: whole numbers, none negative."""
    changes: dict[str, Any] = {}
    for key in ("ctx_size", "n_parallel", "main_gpu", "ubatch_size"):
        if args.get(key) is not None:
            value = _whole(key, args[key])
            if value < (0 if key in ("ctx_size", "main_gpu") else -1):
                raise GpuplanError(f"llama.cpp {key} must not be negative, got {value}")
            changes[key] = value
    if changes.get("n_parallel") == -1:
        changes["n_parallel"] = DEFAULT_PARALLEL
    elif changes.get("n_parallel", 1) > 1 and not args.get("kv_unified"):
        changes["kv_unified"] = False  # -np N: one KV stream per sequence (llama-server)
    if changes.get("n_parallel") == 0 or changes.get("ubatch_size") in (0, -1):
        raise GpuplanError("llama.cpp --parallel and --ubatch-size must be at least 1")
    return changes


def _gpu_layers_arg(args: Mapping[str, Any]) -> dict[str, Any]:
    """-ngl: a count, "all" or <= -2 (every layer); "auto" and -1 leave it to --fit."""
    ngl = args.get("n_gpu_layers")
    if ngl is None or str(ngl).lower() in ("auto", "-1"):
        return {}
    layers = 10**6 if str(ngl).lower() == "all" else _whole("n_gpu_layers", ngl)
    return {"n_gpu_layers": 10**6 if layers < -1 else layers}  # <= -2: all layers


def _cache_type_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """-ctk / -ctv: one of the KV cache types llama.cpp takes."""
    changes: dict[str, Any] = {}
    for key in ("cache_type_k", "cache_type_v"):
        if args.get(key) is not None:
            kv = str(args[key]).lower()
            if kv not in KV_TYPES:
                raise GpuplanError(
                    f"llama.cpp --{key.replace('_', '-')} {kv!r}: not one of {', '.join(KV_TYPES)}"
                )
            changes[key] = kv
    return changes


def _split_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """--split-mode and --tensor-split (shares, "3,1" or "3/1", with a positive sum)."""
    changes: dict[str, Any] = {}
    if args.get("split_mode") is not None:
        mode = str(args["split_mode"]).lower()
        if mode not in SPLIT_MODES:
            raise GpuplanError(f"llama.cpp --split-mode {mode!r}: not one of none, layer, row")
        changes["split_mode"] = mode
    if args.get("tensor_split"):
        try:
            split = tuple(float(x) for x in str(args["tensor_split"]).replace("/", ",").split(","))
        except ValueError:
            raise GpuplanError(
                f"llama.cpp --tensor-split {args['tensor_split']!r}: numbers, e.g. 3,1"
            ) from None
        if len(split) > 128 or any(not 0 <= x < 1e9 for x in split) or not sum(split) > 0:
            raise GpuplanError(
                "llama.cpp --tensor-split needs non-negative shares with a positive sum"
            )
        changes["tensor_split"] = split
    return changes


def _switch_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """-fa (on unless off / 0 / false / disabled), --no-kv-offload, --swa-full."""
    changes: dict[str, Any] = {}
    if args.get("flash_attn") is not None:
        off = ("off", "0", "false", "disabled")
        changes["flash_attn"] = str(args["flash_attn"]).lower() not in off
    for key in ("no_kv_offload", "swa_full"):
        if args.get(key):
            changes[key] = True
    return changes


def _device_args(
    args: Mapping[str, Any], gpus: int | None, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """How many GPUs: given, or --device's list ("none": no layer offloaded), or one per
    --tensor-split share, else one; --split-mode none uses one."""
    out: dict[str, Any] = {}
    split = changes.get("tensor_split", ())
    count = gpus or args.get("gpus")
    if args.get("device"):
        devices = [d for d in str(args["device"]).split(",") if d and d.lower() != "none"]
        count = count or max(1, len(devices))
        if not devices:
            out["n_gpu_layers"] = 0
    count = count or (len(split) if split else 1)
    out["gpus"] = _whole("gpus", count)
    if not 1 <= out["gpus"] <= 64:
        raise GpuplanError(f"llama.cpp: {out['gpus']} GPUs is out of range (1-64)")
    if changes.get("split_mode") == "none":
        out["gpus"] = 1
    return out


def _whole(name: str, value: Any) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise GpuplanError(f"llama.cpp {name} must be a whole number, got {value!r}") from None
    if abs(number) > 10**9:
        raise GpuplanError(f"llama.cpp {name} {number} is out of range")
    return number


# --------------------------------------------------------------------------------------
# Placement
# --------------------------------------------------------------------------------------


@dataclass
class Device:
    """What one device (a GPU, or the host) holds."""

    name: str
    layers: list[int] = field(default_factory=list)
    weights: int = 0
    kv: int = 0
    compute: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.name,
            "layers": _ranges(self.layers),
            "weights_bytes": self.weights,
            "kv_bytes": self.kv,
            "compute_bytes": self.compute,
            "total_bytes": self.weights + self.kv + self.compute,
        }


def _ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2, 5' (the output layer, index n_layer, shown as 'output')."""
    if not layers:
        return ""
    out, start, prev = [], layers[0], layers[0]
    nxt: list[int | None] = [*layers[1:], None]
    for i in nxt:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(out)


def layer_device(il: int, n_layer: int, ngl: int, splits: list[float]) -> int | None:
    """The GPU index of layer `il` (n_layer = the output layer), None for the CPU."""
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1)
    if il < i_gpu_start or il - i_gpu_start >= act or not splits:
        return None
    x = (il - i_gpu_start) / act
    for g, point in enumerate(splits):
        if x < point:
            return g
    return len(splits) - 1


def split_points(shares: tuple[float, ...], gpus: int) -> list[float]:
    """Cumulative, normalised --tensor-split (equal shares by default)."""
    values = list(shares[:gpus]) + [0.0] * max(0, gpus - len(shares)) if shares else [1.0] * gpus
    total = sum(values)
    out, acc = [], 0.0
    for v in values:
        acc += v
        out.append(acc / total)
    return out


def _tensor_groups(ckpt: Checkpoint, n_layer: int) -> tuple[dict[int, int], int, int, int]:
    """(bytes per layer, token-embedding bytes, output bytes, output-norm bytes) from GGUF names."""
    per_layer: dict[int, int] = {}
    embd = out = norm = 0
    for t, r in zip(ckpt.tensors, ckpt.roles, strict=True):
        if r.kind == "vision":
            continue
        if r.layer is not None:
            if r.layer < n_layer:
                per_layer[r.layer] = per_layer.get(r.layer, 0) + t.nbytes
        elif t.name.startswith("token_embd"):
            embd += t.nbytes
        elif t.name.startswith("output."):
            out += t.nbytes
        else:
            norm += t.nbytes  # output_norm, rope_freqs and other small tensors of the output layer
    return per_layer, embd, out, norm


def _row_bytes(p: Precision, n: int) -> int:
    return p.bytes_for(n)


def kv_layer_bytes(arch: Architecture, k: Precision, v: Precision, cells: int, il: int) -> int:
    """One layer's K and V for `cells` cells: row_size(type, n_embd_gqa) per cell each."""
    a = arch.attention
    if a.is_mla:  # llama.cpp caches the latent and the rope part as K, the latent as V
        assert a.kv_lora_rank is not None
        return cells * (
            _row_bytes(k, a.kv_lora_rank + a.qk_rope_head_dim) + _row_bytes(v, a.kv_lora_rank)
        )
    return cells * (
        _row_bytes(k, a.num_kv_heads * a.head_dim) + _row_bytes(v, a.num_kv_heads * a.v_head_dim)
    )


def _cells(arch: Architecture, o: LlamaCppOptions, n_ctx: int, il: int) -> int:
    window = arch.layers[il].sliding_window
    if window is None or o.swa_full:
        return n_ctx
    return min(n_ctx, _pad(window * o.n_parallel + o.ubatch_size))


def _pad(n: int, to: int = CTX_PAD) -> int:
    return -(-n // to) * to


def requested_context(o: LlamaCppOptions, train_ctx: int) -> int:
    """-c as given; unset, the training context (-c 0: builds before ~b4400 and from ~b7000)
    or common.h's 4,096 (between; the b4010 and b5398 logs show one of each)."""
    if o.ctx_size:
        return o.ctx_size
    if o.build is not None and CTX_4096_BUILD <= o.build < FIT_BUILD:
        return OLD_DEFAULT_CTX
    return train_ctx


def gpu_layers(o: LlamaCppOptions, n_layer: int) -> int:
    """-ngl as given; unset, every layer (newer builds: all, then --fit) or none (builds before
    ~b7000: llama_model_default_params' n_gpu_layers = 0)."""
    if o.n_gpu_layers is not None:
        return o.n_gpu_layers
    return 0 if o.build is not None and o.build < FIT_BUILD else n_layer + 1


def context_cells(o: LlamaCppOptions, requested: int) -> int:
    """The KV cells llama.cpp allocates for a requested context (this module's docstring):
    from ~b7000 padded to 256 (per sequence when the cache is not unified), before that to
    get_padding's 256 (flash attention) or 32."""
    if o.build is None or o.build >= PAD_256_BUILD:
        if o.kv_unified or o.n_parallel <= 1:
            return _pad(requested)
        return _pad(requested // o.n_parallel) * o.n_parallel
    return _pad(requested, OLD_PADDING[0] if o.fa else OLD_PADDING[1])


@record
class Placement:
    devices: tuple[Device, ...]  # GPUs, then the host last
    n_ctx: int
    ngl: int
    notes: tuple[str, ...]


def place(
    launch: EngineLaunch,
    o: LlamaCppOptions,
    kv_types: tuple[Precision, Precision],
    n_ctx: int,
    ngl: int,
) -> Placement:
    """Every layer on its device with its weights and KV cells (the input layer on the host,
    the output layer last), then the compute buffers: the rules in this module's docstring."""
    arch, ckpt = launch.arch, launch.weights.stored
    if ckpt is None or ckpt.format != "gguf":
        raise GpuplanError(
            f"{arch.name}: the llama.cpp engine sizes GGUF files; pass the path of a .gguf file"
        )
    groups = _tensor_groups(ckpt, arch.num_layers)
    return _layout(arch, o, kv_types, n_ctx, ngl, groups)


def kv_layout(
    arch: Architecture,
    o: LlamaCppOptions,
    kv_types: tuple[Precision, Precision],
    n_ctx: int,
    ngl: int,
) -> Placement:
    """The same placement without a GGUF file: every layer's KV cells and compute buffers on
    its device (weights zero), for a model known only by its config."""
    return _layout(arch, o, kv_types, n_ctx, ngl, ({}, 0, 0, 0))


def _layout(
    arch: Architecture,
    o: LlamaCppOptions,
    kv_types: tuple[Precision, Precision],
    n_ctx: int,
    ngl: int,
    groups: tuple[dict[int, int], int, int, int],
) -> Placement:
    n_layer = arch.num_layers
    per_layer, embd, out, norm = groups
    gpus = [Device(f"GPU{g}") for g in range(o.gpus)]
    host = Device("host")
    splits = split_points(o.tensor_split, o.gpus)
    k, v = kv_types
    host.weights += embd  # the input layer always stays on the CPU
    for il in range(n_layer + 1):
        if il < n_layer:
            weights = per_layer.get(il, 0)
            kv = kv_layer_bytes(arch, k, v, _cells(arch, o, n_ctx, il), il)
        else:
            weights = norm + (out if out else embd)  # a tied head duplicates token_embd
            kv = 0
        g = layer_device(il, n_layer, ngl, splits)
        _put_layer(o, gpus, host, splits, il, g, weights, kv)
    _compute_buffers(arch, o, n_ctx, gpus, host, ngl)
    return Placement((*gpus, host), n_ctx, ngl, _placement_notes(o, bool(out)))


def _put_layer(
    o: LlamaCppOptions,
    gpus: list[Device],
    host: Device,
    splits: list[float],
    il: int,
    g: int | None,
    weights: int,
    kv: int,
) -> None:
    """Layer `il` onto GPU `g` (None: the host). --split-mode row: each GPU takes its
    --tensor-split share of the matrices, the layer's own device (--main-gpu in builds before
    ~b4000) its KV cache; --no-kv-offload keeps its KV in host RAM."""
    if g is None:
        host.layers.append(il)
        host.weights += weights
        host.kv += kv
        return
    if o.split_mode == "row" and o.gpus > 1:
        for gi, dev in enumerate(gpus):
            share = splits[gi] - (splits[gi - 1] if gi else 0.0)
            dev.weights += round(weights * share)
        old = o.build is not None and o.build < ROW_LAYER_DEVICE_BUILD
        target = gpus[min(o.main_gpu, o.gpus - 1)] if old else gpus[g]
        target.layers.append(il)
    else:
        target = gpus[g]
        target.layers.append(il)
        target.weights += weights
    if o.no_kv_offload:
        host.kv += kv
    else:
        target.kv += kv


def _placement_notes(o: LlamaCppOptions, has_output: bool) -> tuple[str, ...]:
    notes = []
    if o.split_mode == "row" and o.gpus > 1:
        notes.append(
            "--split-mode row: matrices split across GPUs by --tensor-split, each layer's KV"
            " cache and norms on its own device (small tensors are counted in the row split:"
            " an approximation)"
        )
    if not has_output:
        notes.append(
            "no output.weight: llama.cpp duplicates token_embd as the LM head on the output layer's device"
        )
    return tuple(notes)


def _compute_buffers(
    arch: Architecture, o: LlamaCppOptions, n_ctx: int, gpus: list[Device], host: Device, ngl: int
) -> None:
    """The compute buffers of the reserved worst-case graph: the peak of live f32 tensors
    per device (this module's docstring; ggml-alloc.c frees a tensor after its last use)."""
    ub = min(o.ubatch_size, n_ctx)
    h, a = arch.hidden_size, arch.attention
    ff = (
        arch.mlp.intermediate_size
        if arch.mlp
        else (arch.moe.expert_intermediate_size * arch.moe.experts_per_token if arch.moe else 4 * h)
    )
    kv_dim = a.num_kv_heads * a.head_dim
    n_kv = n_ctx // _streams(o)  # the cells one sequence's stream attends over
    rows = ub * 4 * (a.num_heads * a.head_dim + 2 * kv_dim + 3 * h)  # q, k, v, out, residual
    mask = n_kv * ub * 4
    # a quantized cache is cast to f16 for flash attention, one layer's K and V at a time
    cast = 2 * n_ctx * kv_dim * 2 if o.fa and o.cache_type_k not in ("f16", "bf16", "f32") else 0
    attention = rows + (mask + cast if o.fa else a.num_heads * n_kv * ub * 4)
    ffn = ub * 4 * (2 * ff + 2 * h)
    n_out = ub if o.build is not None and o.build < FIT_BUILD else min(ub, o.n_parallel)
    output = 4 * (n_out * arch.vocab_size + ub * h)
    for dev in gpus:
        if dev.layers:
            peaks = [attention, ffn] + ([output] if arch.num_layers in dev.layers else [])
            dev.compute = max(peaks)
    host.compute = ub * h * 4 + mask + (output if arch.num_layers in host.layers else 0)


def _streams(o: LlamaCppOptions) -> int:
    """KV streams: one per sequence when the cache is not unified (builds from ~b7000)."""
    new = o.build is None or o.build >= PAD_256_BUILD
    return o.n_parallel if new and not o.kv_unified and o.n_parallel > 1 else 1


def _gpu_fits(p: Placement, memory: int, margin: int) -> bool:
    return all(
        d.weights + d.kv + d.compute + CUDA_CONTEXT + margin <= memory for d in p.devices[:-1]
    )


def fit(
    launch: EngineLaunch, o: LlamaCppOptions, kv_types: tuple[Precision, Precision]
) -> tuple[Placement, list[str]]:
    """Context and offloaded layers as llama.cpp chooses them (common/fit.cpp, --fit on, the
    default): what the user set is kept; an unset context falls from the training context
    toward 4,096 until every layer fits with 1 GiB free per GPU, then unset GPU layers fall
    until the rest fits."""
    arch = launch.arch
    n_layer = arch.num_layers
    train_ctx = arch.max_position_embeddings or 4096
    memory = launch.gpu.memory_bytes
    notes: list[str] = []
    old = o.build is not None and o.build < FIT_BUILD  # no --fit: what is given is kept
    ctx_set = o.ctx_size > 0 or old
    ngl_set = o.n_gpu_layers is not None or old
    n_ctx = context_cells(o, requested_context(o, train_ctx))
    ngl = gpu_layers(o, n_layer)
    assert ngl is not None
    p = place(launch, o, kv_types, n_ctx, ngl)
    if _gpu_fits(p, memory, FIT_MARGIN):
        return p, notes
    if not ctx_set:
        floor = _pad(min(FIT_MIN_CTX, n_ctx))
        lo, hi = floor, n_ctx
        if _gpu_fits(place(launch, o, kv_types, floor, ngl), memory, FIT_MARGIN):
            while hi - lo > CTX_PAD:  # largest padded context that fits
                mid = _pad((lo + hi) // 2)
                mid = mid if mid < hi else hi - CTX_PAD
                if _gpu_fits(place(launch, o, kv_types, mid, ngl), memory, FIT_MARGIN):
                    lo = mid
                else:
                    hi = mid
            notes.append(f"--fit: context reduced from {n_ctx:,} to {lo:,} to fit every layer")
            return place(launch, o, kv_types, lo, ngl), notes
        n_ctx = floor
        notes.append(f"--fit: context reduced to {floor:,}")
    if not ngl_set:
        for layers in range(n_layer, -1, -1):
            p = place(launch, o, kv_types, n_ctx, layers)
            if _gpu_fits(p, memory, FIT_MARGIN):
                notes.append(
                    f"--fit: {layers} of {n_layer + 1} layers (incl. output) on GPU, the rest in host RAM"
                )
                return p, notes
    return place(launch, o, kv_types, n_ctx, ngl), notes


# --------------------------------------------------------------------------------------
# The bill
# --------------------------------------------------------------------------------------


def llamacpp_bill(
    launch: EngineLaunch, options: LlamaCppOptions, kv_types: tuple[Precision, Precision]
) -> EngineBill:
    """The bill of the most loaded GPU, with every device's share in `settings['devices']`."""
    arch = launch.arch
    refuse_state_layers(arch, "llama.cpp", "recurrent state cache (llama_memory_recurrent)")
    p, fit_notes = fit(launch, options, kv_types)
    gpus, host = list(p.devices[:-1]), p.devices[-1]
    heaviest = max(gpus, key=lambda d: d.weights + d.kv + d.compute)
    total = launch.gpu.memory_bytes
    k, v = kv_types
    items = _gpu_items(arch, options, p, heaviest, kv_types)
    used = sum(i.bytes for i in items)
    per_token = sum(kv_layer_bytes(arch, k, v, 1, i) for i in range(arch.num_layers))
    failure = None
    if used > total:
        failure = f"{heaviest.name} needs {used / 2**30:.2f} GiB of {total / 2**30:.2f} GiB (cudaMalloc fails)"
    spread = max(gib(0.1), heaviest.compute // 2)
    return EngineBill(
        launch=launch,
        engine="llamacpp",
        version=VERSION,
        total_bytes=total,
        budget_bytes=total,
        items=items,
        kv_cache_bytes=sum(d.kv for d in p.devices),
        kv_capacity_tokens=p.n_ctx,
        # KV capacity over one full-length request, as vLLM's "Maximum concurrency" line means it:
        # with a unified cache one n_ctx-token request takes every cell, whatever -np says
        max_concurrency=1.0 if p.n_ctx else 0.0,
        max_model_len=p.n_ctx,  # unified cache: any slot may use every cell
        slots=options.n_parallel,
        kv_bytes_per_token=per_token,
        block_size=CTX_PAD,
        num_blocks=p.n_ctx // CTX_PAD,
        fits=failure is None,
        failure=failure,
        outside_budget=_host_items(host),
        ranges={
            "compute": Range(
                heaviest.compute,
                max(0, heaviest.compute - spread),
                heaviest.compute + spread,
                "ggml graph allocation (ubatch, flash attention, backend)",
            )
        },
        notes=_notes(arch, options, p, fit_notes),
        settings=_settings(options, p, kv_types),
    )


def _gpu_items(
    arch: Architecture,
    options: LlamaCppOptions,
    p: Placement,
    heaviest: Device,
    kv_types: tuple[Precision, Precision],
) -> tuple[LineItem, ...]:
    """The heaviest GPU's lines: its weights, KV cache, compute buffer and CUDA context."""
    k, v = kv_types
    return (
        budget_item(
            "weights",
            "Weights",
            heaviest.weights,
            f"GGUF tensor bytes of layers {_ranges(heaviest.layers) or 'none'} on {heaviest.name}",
            {"layers": _ranges(heaviest.layers), "device": heaviest.name},
            "weights",
        ),
        budget_item(
            "kv_cache",
            "KV cache",
            heaviest.kv,
            f"{p.n_ctx:,} cells × its layers × (K {k.id} + V {v.id}) rows",
            {"n_ctx": p.n_ctx, "cache_type_k": k.id, "cache_type_v": v.id},
            "kv_cache",
        ),
        budget_item(
            "compute",
            "Compute buffer",
            heaviest.compute,
            f"one {options.ubatch_size}-token graph: activations"
            + (", attention scores" if not options.fa else "")
            + (", logits" if arch.num_layers in heaviest.layers else "")
            + " (estimated)",
            {"ubatch": options.ubatch_size},
            "activations",
        ),
        budget_item(
            "cuda_context",
            "CUDA context",
            CUDA_CONTEXT,
            "CUDA context and cuBLAS handles (allowance)",
            {},
            "overhead",
        ),
    )


def _host_items(host: Device) -> tuple[LineItem, ...]:
    """What stays in host RAM: the token embedding and CPU layers, their KV, the host buffers."""
    return (
        budget_item(
            "host_weights",
            "Host RAM: weights",
            host.weights,
            f"token embedding + CPU layers {_ranges(host.layers) or 'none'}",
            {},
            "weights",
        ),
        budget_item(
            "host_kv",
            "Host RAM: KV cache",
            host.kv,
            "KV of CPU layers (all of it with --no-kv-offload)",
            {},
            "kv_cache",
        ),
        budget_item(
            "host_compute",
            "Host RAM: buffers",
            host.compute,
            "logits output buffer and CPU compute buffer (estimated)",
            {},
            "other",
        ),
    )


def _notes(
    arch: Architecture, options: LlamaCppOptions, p: Placement, fit_notes: list[str]
) -> tuple[str, ...]:
    notes = list(fit_notes) + list(p.notes)
    notes.append(
        f"{options.n_parallel} parallel slot(s) share one unified KV cache of {p.n_ctx:,} cells"
    )
    if any(layer.sliding_window for layer in arch.layers) and not options.swa_full:
        notes.append(
            "sliding-window layers keep min(n_ctx, window × slots + ubatch) cells (--swa-full keeps all)"
        )
    return tuple(notes)


def _settings(
    options: LlamaCppOptions, p: Placement, kv_types: tuple[Precision, Precision]
) -> dict[str, Any]:
    """The settings llama.cpp ran with, and every device's share."""
    k, v = kv_types
    return {
        "n_ctx": p.n_ctx,
        "n_parallel": options.n_parallel,
        "n_gpu_layers": p.ngl,
        "split_mode": options.split_mode,
        "cache_type_k": k.id,
        "cache_type_v": v.id,
        "flash_attn": options.fa,
        "gpus": options.gpus,
        "devices": [d.to_dict() for d in p.devices],
    }
