"""Training recipes: what one trainable parameter costs in weights, gradients and optimizer states.

A recipe is a data record (catalog/data/recipes.toml). Its bytes per parameter are derived from
the precisions it names, never typed in:

    bytes/param = weights + gradients + master copy + Σ optimizer states

bf16 mixed-precision AdamW is the ZeRO paper's 2Ψ + 2Ψ + KΨ with K = 12 (Rajbhandari et al.
2020, §3.1) and the lesson's 16 bytes per parameter; Megatron-LM's bf16 recipe keeps an fp32
`main_grad` buffer instead of a bf16 one (18 bytes, Megatron-LM docs on the distributed optimizer).

Low-bit and paged optimizer states (the libraries' own code paths):

  * bitsandbytes 8-bit (AdamW8bit, PagedAdamW8bit; bitsandbytes/optim/optimizer.py
    Optimizer2State.init_state): each state is a uint8 tensor of the parameter's shape plus one
    fp32 absmax per block of 256 elements (`blocksize = 256`, `blocks = ⌈n ÷ 256⌉`); a tensor of
    fewer than `min_8bit_size` = 4096 elements keeps fp32 states. The quantisation maps are one
    pair per optimizer, not per tensor.
  * bitsandbytes paged (`is_paged=True`; Optimizer8bit.get_state_buffer, functional.get_paged):
    a state tensor of ≥ 1e5 elements is allocated with cudaMallocManaged (CUDA unified memory),
    outside PyTorch's caching allocator: torch.cuda.max_memory_allocated/reserved never see it,
    nvidia-smi does once the optimizer has touched it, and the driver pages it out to host memory
    under pressure instead of failing. The absmax blocks stay ordinary (allocator) tensors.
  * torchao AdamW8bit / AdamW4bit (torchao/optim/adam.py _AdamBase._new_buffer,
    subclass_8bit.py / subclass_4bit.py OptimState*.zeros): codes (8 bits, or 4 bits packed two
    per byte) + one fp32 scale per block (256 for 8-bit, 128 for 4-bit) + a per-tensor fp32
    lookup table (256 or 16 entries); only tensors of ≥ 4096 elements whose size is a multiple
    of the block are quantised, the others keep states in the parameter's dtype.

The bill counts every parameter at the quantised rate (a model's vectors, which fall back, are
< 0.1 % of it); `state_tensor_bytes` gives the per-tensor rule the tests check against the real
optimizers.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cached_property

from gpuplan.engine.frozen import record
from gpuplan.engine.precision import Precision


@record
class OptimizerState:
    """One optimizer state tensor kept per parameter (exp_avg, exp_avg_sq, momentum_buffer...)."""

    name: str
    format: Precision


@record(cache_hash=True)
class TrainingRecipe:
    """How a trainable parameter is stored: working weights, gradient, fp32 master, states.

    `factored` marks Adafactor's factored second moment, whose size depends on the matrix
    shapes (rows + columns per matrix) rather than on the parameter count. `autocast` marks
    torch AMP over fp32 weights: activations in bf16, and each linear weight's bf16 cast cached
    for the forward and saved by its matmul until that layer's backward
    (torch/amp/autocast_mode.py cache_enabled=True).
    """

    id: str
    name: str
    weights: Precision
    grads: Precision
    master: Precision | None
    states: tuple[OptimizerState, ...]
    factored: bool = False
    autocast: bool = False  # torch.autocast over these (fp32) weights: bf16 casts per matmul
    paged: bool = (
        False  # states in CUDA unified memory (bitsandbytes is_paged): not in torch's counters
    )
    quantize_min: int = (
        0  # tensors with fewer elements keep `small_state` (bitsandbytes/torchao 4096)
    )
    small_state: Precision | None = None  # their states' format (None: the parameter's dtype)
    whole_blocks: bool = (
        False  # quantise only tensors whose size is a multiple of the block (torchao)
    )
    qmap_bytes: int = 0  # a lookup table per quantised state tensor (torchao's qmap)
    paged_min: int = 0  # smaller state tensors are ordinary allocations (bitsandbytes 1e5)
    source: str = ""

    @cached_property
    def optimizer_bytes_per_param(self) -> Fraction:
        """Σ of the optimizer states (the fp32 master is its own line and not counted here)."""
        return sum((s.format.bytes_per_param for s in self.states), Fraction(0))

    @property
    def master_bytes_per_param(self) -> Fraction:
        return self.master.bytes_per_param if self.master else Fraction(0)

    @property
    def bytes_per_param(self) -> Fraction:
        """weights + gradients + master + optimizer states: 16 for bf16 AdamW, 18 for Megatron's."""
        return (
            self.weights.bytes_per_param
            + self.grads.bytes_per_param
            + self.master_bytes_per_param
            + self.optimizer_bytes_per_param
        )

    @cached_property
    def paged_fraction(self) -> Fraction:
        """The share of the optimizer states' bytes that lives in unified memory: the state
        payloads (bits per element), not their block scales (allocator tensors)."""
        total = self.optimizer_bytes_per_param
        if not self.paged or not total:
            return Fraction(0)
        payload = sum((Fraction(s.format.bits, 8) for s in self.states), Fraction(0))
        return payload / total

    def paged_bytes(self, optimizer_bytes: int) -> int:
        """Of `optimizer_bytes` of states on one GPU, those in unified memory."""
        return int(optimizer_bytes * self.paged_fraction)

    def describe(self) -> str:
        parts = [f"weights {self.weights.id}", f"grads {self.grads.id}"]
        if self.master:
            parts.append(f"master {self.master.id}")
        parts += [f"{s.name} {s.format.id}" for s in self.states]
        if self.factored:
            parts.append("factored 2nd moment fp32")
        b = self.bytes_per_param
        per = f"{float(b):g}" if b.denominator in (1, 2, 4, 8) else f"{float(b):.3f}"
        return f"{self.name}: {', '.join(parts)} = {per} bytes/param"


def state_tensor_bytes(recipe: TrainingRecipe, numel: int, param: Precision) -> tuple[int, int]:
    """(allocator bytes, unified-memory bytes) of the optimizer states of one parameter tensor
    of `numel` elements stored as `param`, by the libraries' rules (module docstring)."""
    if numel <= 0 or not recipe.states:
        return 0, 0
    small = numel < recipe.quantize_min
    if recipe.whole_blocks:
        small = small or any(
            s.format.group_size and numel % s.format.group_size for s in recipe.states
        )
    allocator = paged = 0
    for s in recipe.states:
        fmt = s.format
        if small and fmt.group_size:
            fmt = recipe.small_state or param
        if not fmt.group_size:
            payload, extra = fmt.bytes_for(numel), 0
        else:
            payload = -(-numel * fmt.bits // 8)
            extra = fmt.bytes_for(numel) - payload + recipe.qmap_bytes
        if recipe.paged and numel >= recipe.paged_min:
            paged += payload
        else:
            allocator += payload
        allocator += extra
    return allocator, paged
