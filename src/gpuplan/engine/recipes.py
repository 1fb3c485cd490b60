"""Training recipes: what one trainable parameter costs in weights, gradients and optimizer states.

A recipe is a data record (catalog/data/recipes.toml). Its bytes per parameter are derived from
the precisions it names, never typed in:

    bytes/param = weights + gradients + master copy + Σ optimizer states

bf16 mixed-precision AdamW is the ZeRO paper's 2Ψ + 2Ψ + KΨ with K = 12 (Rajbhandari et al.
2020, §3.1) and the lesson's 16 bytes per parameter; Megatron-LM's bf16 recipe keeps an fp32
`main_grad` buffer instead of a bf16 one (18 bytes, Megatron-LM docs on the distributed optimizer).
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
