"""The web API's request bodies: typed, bounded, and strict about unknown fields.

Shared by the server process (validation, the work budget, the cache key) and the worker
processes that compute the answers (web/compute.py), so it imports pydantic and nothing heavy.
The bodies' knobs are generated from their one declaration (api/requests.py): type, closed set,
bounds, default and description; only the web's own fields (model or pasted config, overrides,
units, server size, fixes) are written here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from gpuplan.api import requests
from gpuplan.api.requests import Knob, pick

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


def annotation(knob: Knob, bounded: bool = True) -> Any:
    """A knob's pydantic type: its closed set as a Literal, its bounds as Field constraints
    (`bounded=False`: the type alone, for the MCP tools, whose values the request record checks);
    optional where its default is None."""
    if knob.choices:
        kind: Any = Literal[knob.choices]
    elif knob.kind in ("count", "tokens", "gpus"):
        kind = Annotated[int, Field(ge=knob.ge, le=knob.le, strict=True)] if bounded else int
        if knob.kind == "gpus":
            kind = kind | Literal["auto"]
    elif knob.kind == "number":
        kind = (
            Annotated[float, Field(ge=knob.ge, gt=knob.gt, le=knob.le, allow_inf_nan=False)]
            if bounded
            else float
        )
    else:
        kind = _KIND_TYPES[knob.kind] if bounded else _PLAIN.get(knob.kind, knob.type)
    return kind | None if knob.default is None else kind


_KIND_TYPES: dict[str, Any] = {
    "name": Name,
    "size": Size,
    "flag": bool,
    "name_or_flag": bool | Name,
    "names": list[Name],
    "mapping": dict[str, Any],
}


_PLAIN: dict[str, Any] = {"names": list[str]}


def fields_for(knobs: tuple[Knob, ...]) -> dict[str, Any]:
    """pydantic field definitions of `knobs`: type, default, and the knob's help as description."""
    return {
        k.name: (annotation(k), Field(default=_json_default(k.default), description=k.help or None))
        for k in knobs
    }


def _json_default(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# the knobs each body takes, by name (api/requests.py declares them); a file path never (web
# requests read no file: serve's --revision and --calibration stay on the command line)
SERVE_FIELDS = (
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dtype",
    "kv_dtype",
    "context",
    "users",
    "headroom",
    "gpu_memory",
    "workspace",
    "cuda_context",
)
SPEED_FIELDS = ("prompt", "output", "request_rate", "eager")
TRAIN_FIELDS = (
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dp",
    "zero",
    "fsdp",
    "micro_batch",
    "seq",
    "target_seq",
    "checkpointing",
    "method",
    "lora_rank",
    "optimizer",
    "headroom",
    "gpu_memory",
)
FIXES = (bool, Field(default=True, description="When it does not fit, look for the cheapest fix"))

SpeedAsk: Any = create_model(
    "SpeedAsk",
    __base__=_Strict,
    __doc__="The layout's speed under `vllm bench serve` (api/serving_speed.py): `users` requests"
    " in flight, or Poisson arrivals at `request_rate`; prompt / output default to 3/4 and 1/4 of"
    " the context (api/requests.py speed_tokens, the CLI's and `gpuplan plan`'s rule too).",
    **fields_for(pick(requests.SPEED, SPEED_FIELDS)),
)
ServeRequest: Any = create_model(
    "ServeRequest",
    __base__=_Request,
    __doc__="The inputs of `gpuplan.api.serve`, plus display options.",
    **fields_for(pick(requests.SERVE, SERVE_FIELDS)),
    fixes=FIXES,
    speed=(SpeedAsk | None, Field(default=None, description="Also time the layout (TTFT, TPOT)")),
)


class _TrainBase(_Request):
    def searches(self) -> bool:
        return super().searches() and getattr(self, "dp", None) is None


TrainRequest: Any = create_model(
    "TrainRequest",
    __base__=_TrainBase,
    __doc__="The training controls; passed to `gpuplan.api.train` where it accepts them.",
    **fields_for(pick(requests.TRAIN, TRAIN_FIELDS)),
    # the page's weight-format control, not a train() input (listed as ignored; never any text)
    dtype=(Name | None, Field(default=None, description="Weight format (not a training input)")),
    fixes=(bool, Field(default=True, description="When it does not fit, look for the fixes")),
)


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
