"""The web API's request bodies: typed, bounded, and strict about unknown fields.

Shared by the server process (validation, the work budget, the cache key) and the worker
processes that compute the answers (web/compute.py), so it imports pydantic and nothing heavy.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_BODY_BYTES = 256 * 1024
MAX_SWEEP_POINTS = 64
MAX_CONFIG_DEPTH = 32

# strict integers: JSON `true` is not 1 GPU, nor `gpu_memory: true` 1 byte
Count = Annotated[int, Field(ge=1, le=1024, strict=True)]
Name = Annotated[str, Field(min_length=1, max_length=120)]
Size = (
    Annotated[str, Field(min_length=1, max_length=32)]
    | Annotated[int, Field(ge=0, le=10**15, strict=True)]
)


OverrideKey = Literal[
    "num_key_value_heads",
    "num_attention_heads",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "head_dim",
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Name | None = Field(
        default=None, description="Catalog name or Hugging Face id in the catalog (never a path)"
    )
    config: dict[str, Any] | None = Field(
        default=None, description="A pasted config.json object, instead of `model`"
    )
    overrides: dict[OverrideKey, Annotated[int, Field(ge=1, le=10**7)]] | None = Field(
        default=None,
        description="Change a few numbers of the model's config (e.g. num_key_value_heads) to see what they cost",
    )
    gpu: Name = Field(default="h100", description="GPU id or alias (see /api/gpus)")
    gpu_memory: Size | None = Field(default=None, description="Override the GPU memory, e.g. 80GB")
    headroom: float = Field(default=0.9, gt=0, le=1, allow_inf_nan=False)
    units: Literal["GB", "GiB"] = "GB"
    server_gpus: Count = Field(default=8, description="GPUs in the drawn server (display only)")

    @model_validator(mode="after")
    def _one_model(self) -> _Request:
        if self.model is None and self.config is None:
            raise ValueError("give either `model` (a catalog name) or `config` (a config.json)")
        if self.model is not None and self.config is not None:
            raise ValueError("give `model` or `config`, not both")
        return self

    def searches(self) -> bool:
        """Whether the engine searches GPU counts for this body (no count, no layout given)."""
        gpus = getattr(self, "gpus", None)
        return gpus in (None, "auto") and getattr(self, "tp", None) is None

    def layers(self) -> int | None:
        """The layer count a pasted config or an override asks for, if any (None: the catalog's)."""
        if self.overrides and "num_hidden_layers" in self.overrides:
            return self.overrides["num_hidden_layers"]
        config = self.config or {}
        for source in (config, config.get("text_config"), config.get("llm_config")):
            if isinstance(source, dict):
                value = source.get("num_hidden_layers", source.get("n_layer"))
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
        return None


class SpeedAsk(BaseModel):
    """The layout's speed under `vllm bench serve` (api/serving_speed.py): `users` requests in
    flight, or Poisson arrivals at `request_rate`; prompt / output default to 3/4 and 1/4 of the
    context, as `gpuplan plan` takes them."""

    model_config = ConfigDict(extra="forbid")

    prompt: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] | None = None
    output: Annotated[int, Field(ge=1, le=100_000, strict=True)] | None = None
    request_rate: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] | None = None
    eager: bool = False


class ServeRequest(_Request):
    """The inputs of `gpuplan.api.serve`, plus display options."""

    gpus: Count | Literal["auto"] | None = Field(
        default=None, description="GPU count, 'auto' (fewest that fit), or null (1 if it fits)"
    )
    tp: Count | None = None
    pp: Count | None = None
    dtype: Name | None = Field(default=None, description="Weight format (see /api/precisions)")
    kv_dtype: Name | None = None
    context: Annotated[int, Field(ge=1, le=10_000_000)] = 4096
    users: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    workspace: Size | None = None
    cuda_context: Size | None = None
    fixes: bool = Field(default=True, description="When it does not fit, look for the cheapest fix")
    speed: SpeedAsk | None = Field(default=None, description="Also time the layout (TTFT, TPOT)")


class TrainRequest(_Request):
    """The training controls; passed to `gpuplan.api.train` where it accepts them."""

    gpus: Count | Literal["auto"] | None = None
    tp: Count | None = None
    pp: Count | None = None
    dp: Count | None = None
    dtype: Name | None = None
    zero: Annotated[int, Field(ge=0, le=3)] | None = None
    fsdp: bool | None = None
    micro_batch: Annotated[int, Field(ge=1, le=4096)] | None = None
    seq: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    checkpointing: bool | Name | None = None
    method: Literal["full", "lora", "qlora"] | None = None
    lora_rank: Annotated[int, Field(ge=1, le=4096)] | None = None
    optimizer: Name | None = None
    fixes: bool = Field(default=True, description="When it does not fit, look for the fixes")

    def searches(self) -> bool:
        return super().searches() and self.dp is None


SERVE_SWEEPS = ("context", "users", "gpus")
TRAIN_SWEEPS = ("zero", "gpus", "seq", "micro_batch")


class SweepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["serve", "train"] = "serve"
    base: dict[str, Any] = Field(description="A /api/serve or /api/train body")
    vary: Literal["context", "users", "gpus", "zero", "seq", "micro_batch"]
    values: list[Annotated[int, Field(ge=0, le=10_000_000)]] = Field(
        min_length=1, max_length=MAX_SWEEP_POINTS
    )

    def base_request(self) -> ServeRequest | TrainRequest:
        """The base body, validated as the request of its mode (a ValidationError if not)."""
        model = ServeRequest if self.mode == "serve" else TrainRequest
        return model.model_validate({**self.base, "fixes": False})


def depth(value: Any, limit: int = MAX_CONFIG_DEPTH) -> int:
    """How deeply `value` nests (stops counting past `limit`)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest
