"""vLLM's version rules (versions.toml beside this file), and the set that applies to a launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuplan.engine.profiles import EngineLaunch
from gpuplan.engine.profiles.common import load_version_rules

RULES = load_version_rules(Path(__file__).with_name("versions.toml"))


def rules_at(version: str, engine: str | None = None) -> dict[str, Any]:
    """Every rule's value at `version`; `engine` ("v0"/"v1", e.g. from a log banner) overrides
    the version's default engine. Keys "v0.x" / "v1.x" are kept for the engine that runs."""
    values = RULES.at(version)
    if engine in ("v0", "v1"):
        values["engine"] = engine
        if engine == "v1" and "v1.non_torch_scope" not in values:
            # V1 before 0.8 (VLLM_USE_V1=1): its worker measured as 0.8.0's did
            # (v1/worker/gpu_worker.py::determine_available_memory, absolute non-torch memory);
            # rules the version itself states for V1 are kept
            ref = RULES.at("0.8.0")
            values.update({k: v for k, v in ref.items() if k.startswith("v1.") and k not in values})
    prefix = values["engine"] + "."
    for key in [k for k in values if k.startswith(prefix)]:
        values[key[len(prefix) :]] = values[key]
    if values["engine"] == "v0":
        values["hybrid_kv"] = False
        values["sampler_path"] = "v0"  # the V0 sampler, whichever release still shipped it
    return values


def rules_for(launch: EngineLaunch) -> dict[str, Any]:
    """The rules of the launch's version; a model with state layers runs on V0 before 0.10.2
    (the V1 oracle sent it back) unless the log's banner says V1."""
    engine = launch.args.get("vllm_engine")
    values = rules_at(launch.version, engine)
    if (
        engine is None
        and values["engine"] == "v1"
        and not values["v1_for_state_models"]
        and launch.arch.num_state_layers
    ):
        values = rules_at(launch.version, "v0")
        values["state_model_fallback"] = True
    return values
