"""Serving speed from operators: per-step operator times (step.py) on a layout's per-rank shapes
(shape.py) with kernel efficiencies per GPU architecture (kernels.toml, kernels.py), driven by a
simulation of the engine's scheduler under `vllm bench serve`'s load modes (schedule.py).

The design follows Vidur (Agrawal et al., MLSys 2024: operator-level step times plus a scheduler
simulation) with published kernel efficiencies in place of profiled tables."""
