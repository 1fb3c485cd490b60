"""Low-bit and paged optimizer states against the real optimizers (bitsandbytes, torchao) on CPU.

Each optimizer takes one step over a small model whose tensors cover the libraries' rules (a
matrix that is a multiple of the block, one that is not, vectors under 4096 elements); the bytes
of the state tensors it then holds must equal gpuplan's `state_tensor_bytes` for the recipe
that names it. bitsandbytes' quantisation maps (one pair per optimizer, shared by every tensor)
are left out, as the recipe does. On the CPU bitsandbytes never pages (get_state_buffer falls
back to ordinary tensors), so the paged split is checked from its mechanism instead: the bill's
allocated bytes lose exactly the states' payload, its total does not.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import gpuplan  # noqa: E402
from gpuplan.catalog.precisions import get_precision  # noqa: E402
from gpuplan.catalog.recipes import get_recipe  # noqa: E402
from gpuplan.engine.recipes import state_tensor_bytes  # noqa: E402

pytestmark = pytest.mark.reference

SHARED = {"qmap1", "qmap2", "step", "unorm_vec"}  # per optimizer or scalars: not per-parameter
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def _model(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),  # 131072 weights: a multiple of 256 and of 128; 512 bias
        torch.nn.LayerNorm(512),  # vectors under 4096 elements
        torch.nn.Linear(512, 300, bias=False),  # 153600: a multiple of 256, not of 1024
        torch.nn.Linear(300, 23, bias=False),  # 6900: ≥ 4096, not a multiple of 256
    )
    return model.to(dtype)


def _tensor_bytes(value) -> int:
    if hasattr(value, "codes"):  # torchao's OptimState8bit / OptimState4bit
        return value.codes.nbytes + value.scale.nbytes + value.qmap.nbytes
    return value.nbytes


def _real_state_bytes(optimizer_cls, dtype) -> dict[int, int]:
    model = _model(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = optimizer_cls(model.parameters())
        model(torch.randn(4, 256, dtype=dtype)).float().sum().backward()
        opt.step()
    out = {}
    for p, state in opt.state.items():
        out[p.numel()] = out.get(p.numel(), 0) + sum(
            _tensor_bytes(v)
            for k, v in state.items()
            if isinstance(v, torch.Tensor) and k not in SHARED
        )
    return out


def _predicted(recipe_id: str, dtype) -> dict[int, int]:
    recipe = get_recipe(recipe_id)
    param = get_precision(DTYPES[dtype])
    out: dict[int, int] = {}
    for p in _model(dtype).parameters():
        allocator, paged = state_tensor_bytes(recipe, p.numel(), param)
        out[p.numel()] = out.get(p.numel(), 0) + allocator + paged
    return out


def _bnb():
    return pytest.importorskip("bitsandbytes")


def _torchao_optim():
    pytest.importorskip("torchao")
    from torchao import optim

    return optim


@pytest.mark.parametrize(
    ("name", "recipe_id"),
    [
        ("AdamW8bit", "adamw8bit-pure-bf16"),
        ("PagedAdamW8bit", "paged-adamw8bit-pure-bf16"),
        ("PagedAdamW", "paged-adamw32bit-pure-bf16"),
    ],
)
def test_bitsandbytes_states_match(name, recipe_id):
    bnb = _bnb()
    real = _real_state_bytes(getattr(bnb.optim, name), torch.float32)
    assert real == _predicted(recipe_id, torch.float32)


@pytest.mark.parametrize(
    ("name", "recipe_id"),
    [("AdamW8bit", "torchao-adamw8bit-pure-bf16"), ("AdamW4bit", "torchao-adamw4bit-pure-bf16")],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torchao_states_match(name, recipe_id, dtype):
    optim = _torchao_optim()
    real = _real_state_bytes(getattr(optim, name), dtype)
    assert real == _predicted(recipe_id, dtype)


def test_bitsandbytes_block_is_256():
    """The 8-bit recipes' block: bitsandbytes keeps one fp32 absmax per 256 elements."""
    bnb = _bnb()
    p = torch.nn.Parameter(torch.randn(1000, 10))
    opt = bnb.optim.AdamW8bit([p])
    p.grad = torch.randn_like(p)
    opt.step()
    assert opt.state[p]["absmax1"].numel() == -(-10000 // 256)
    for rid in ("adamw-8bit", "adamw8bit-pure-bf16", "paged-adamw8bit-pure-bf16"):
        assert all(s.format.group_size == 256 for s in get_recipe(rid).states)


def _bill(recipe: str):
    return gpuplan.train(
        "llama-3.2-1b",
        gpus=1,
        gpu="a100-80gb",
        recipe=recipe,
        framework="torchtune",
        seq=2048,
        micro_batch=1,
        grad_accum=1,
        checkpointing="full",
    )


def test_paged_states_leave_the_allocator_counters_not_the_device():
    """PagedAdamW8bit: the uint8 payload (one byte per parameter per state, every tensor of the
    model being ≥ 1e5 elements bar the norms) moves out of allocated/reserved into a separate
    unified-memory line that the total (nvidia-smi) still counts; the absmax blocks stay."""
    plain, paged = _bill("adamw8bit-pure-bf16"), _bill("paged-adamw8bit-pure-bf16")
    n = paged.bill.trainable_params
    payload = 2 * n  # two uint8 states
    moved = plain.bill.allocated_bytes - paged.bill.allocated_bytes
    assert abs(moved - payload) <= 0.001 * payload
    line = {i.key: i for i in paged.bill.items}["optimizer_paged"]
    assert abs(line.bytes - payload) <= 0.001 * payload
    assert paged.per_gpu_total_bytes > paged.bill.reserved_bytes + line.bytes
    assert any("unified memory" in note for note in paged.bill.notes)


def test_torchtune_reader_names_the_paged_and_torchao_optimizers():
    from gpuplan.engine.frameworks.torchtune import _recipe

    def recipe(component: str, dtype: str = "bf16") -> str:
        return _recipe({"optimizer": {"_component_": component}, "dtype": dtype})

    assert recipe("bitsandbytes.optim.PagedAdamW8bit") == "paged-adamw8bit-pure-bf16"
    assert recipe("bitsandbytes.optim.AdamW8bit") == "adamw8bit-pure-bf16"
    assert recipe("bitsandbytes.optim.PagedAdamW") == "paged-adamw32bit-pure-bf16"
    assert recipe("torchao.optim.AdamW8bit") == "torchao-adamw8bit-pure-bf16"
    assert recipe("torchao.optim.AdamW4bit") == "torchao-adamw4bit-pure-bf16"


def test_only_large_lora_tensors_are_paged():
    """bitsandbytes pages a state only when its tensor has ≥ 1e5 elements
    (Optimizer8bit.get_state_buffer): Llama-3.2-1B (h 2048, MLP 8192), r = 16 on gate_proj:
    lora_A 16 × 2048 = 32,768 elements stays an allocator tensor, lora_B 8192 × 16 = 131,072
    is paged — one uint8 byte per element per state, 16 layers; on q_proj / v_proj nothing is."""

    def plan(targets):
        return gpuplan.train(
            "llama-3.2-1b",
            gpus=1,
            gpu="a100-80gb",
            recipe="paged-adamw8bit-pure-bf16",
            lora_rank=16,
            lora_targets=targets,
            seq=1024,
        )

    lines = {i.key: i.bytes for i in plan(["gate_proj"]).bill.items}
    assert lines["optimizer_paged"] == 2 * 16 * 8192 * 16
    assert "optimizer_paged" not in {i.key for i in plan(["q_proj", "v_proj"]).bill.items}
