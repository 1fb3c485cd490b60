"""The lesson's API: headline comparisons, what changed, and drill answers checked by the engine.

Registered by `web/app.py` under /api/lesson. Every figure comes from the engine through the same
request models and runners as /api/serve and /api/train; this module only sets plans side by side
(`gpuplan.api.compare`) and reads what a learner typed.

- `POST /api/lesson/compare`: a base request and up to 8 variants of it → each plan's headline, its
  ratios to the reference variant, and one vertical scale that holds them all.
- `POST /api/lesson/change`: two requests → the bill lines that moved and a caption.
- `POST /api/lesson/check`: a step number and a typed answer → right or not, with the arithmetic.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuplan.api.compare import compare, describe_change
from gpuplan.errors import GpuplanError
from gpuplan.units import format_bytes

MAX_VARIANTS = 8
router = APIRouter(prefix="/api/lesson", tags=["lesson"])


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base: dict[str, Any] = Field(description="A /api/serve or /api/train body, plus `mode`")
    variants: list[dict[str, Any]] = Field(
        min_length=1, max_length=MAX_VARIANTS, description="Changes to `base`, one plan each"
    )
    reference: Annotated[int, Field(ge=0, lt=MAX_VARIANTS)] = 0


class ChangeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    before: dict[str, Any]
    after: dict[str, Any]


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: Annotated[int, Field(ge=1, le=100)]
    answer: Annotated[str, Field(max_length=64)]


# --- running a request body ------------------------------------------------------------------


def run_body(body: dict[str, Any]) -> dict[str, Any]:
    """A serve or train body (with `mode`) → the engine's answer, without looking for fixes."""
    from gpuplan.web.compute import run_serve, run_train
    from gpuplan.web.schema import ServeRequest, TrainRequest

    fields = dict(body)
    mode: Literal["serve", "train"] = fields.pop("mode", "serve")
    if mode not in ("serve", "train"):
        raise GpuplanError(f"mode must be serve or train, got {mode!r}")
    fields["fixes"] = False
    try:
        if mode == "train":
            return run_train(TrainRequest.model_validate(fields))
        return run_serve(ServeRequest.model_validate(fields))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise GpuplanError(f"{where}: {first.get('msg', 'invalid')}") from None


def _try(body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return run_body(body), None
    except GpuplanError as err:
        return None, str(err)


def run_compare(req: CompareRequest) -> dict[str, Any]:
    current = run_body(req.base)
    answers = [_try({**req.base, **variant}) for variant in req.variants]
    out = compare([a for a, _ in answers], min(req.reference, len(answers) - 1), current)
    out["errors"] = [e for _, e in answers]
    return out


def run_change(req: ChangeRequest) -> dict[str, Any]:
    return describe_change(run_body(req.before), run_body(req.after))


# --- drills ----------------------------------------------------------------------------------


@cache
def lesson() -> dict[str, Any]:
    """static/lesson.json, the steps as data (written by tools/make_lesson.py)."""
    text = resources.files("gpuplan.web").joinpath("static", "lesson.json").read_text("utf-8")
    return dict(json.loads(text))


def pick(data: Any, path: str) -> Any:
    """ "per_gpu.items[category=optimizer].bytes" → that value in an engine answer; a filter that
    matches several list entries sums their `bytes`."""
    node = data
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)(?:\[(\w+)=([^\]]+)\])?", part)
        if m is None or not isinstance(node, dict):
            return None
        node = node.get(m.group(1))
        if m.group(2):
            if not isinstance(node, list):
                return None
            found = [x for x in node if str(x.get(m.group(2))) == m.group(3)]
            if not found:
                return None
            node = found[0] if len(found) == 1 else {"bytes": sum(x["bytes"] for x in found)}
    return node


BYTE_UNITS = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
NEIGHBOURS = {"MB": ("kB", "GB"), "GB": ("MB", "TB"), "TB": ("GB", None)}
_ANSWER = re.compile(r"^\s*([0-9][0-9.,'\u00a0\u202f ]*)\s*([A-Za-z]*)\s*$")


class AnswerError(ValueError):
    """What a learner typed is not a number (with an optional unit)."""


def parse_number(text: str) -> tuple[float, int]:
    """A typed number → (value, significant digits). Thousands separators (1,120 or 1 120) and
    decimal commas (16,3) are read as a person means them: a comma followed by exactly three
    digits groups thousands, any other comma is a decimal point; with both a comma and a dot,
    the later one is the decimal point."""
    s = re.sub(r"['\u00a0\u202f ]", "", text)
    if "," in s and "." in s:
        decimal = "," if s.rfind(",") > s.rfind(".") else "."
        thousands = "." if decimal == "," else ","
        whole, _, frac = s.rpartition(decimal)
        s = _grouped(whole, thousands) + "." + frac
    elif s.count(",") > 1 or s.count(".") > 1:
        mark = "," if "," in s else "."
        s = _grouped(s, mark)
    elif "," in s:
        head, tail = s.split(",")
        s = head + tail if len(tail) == 3 and head not in ("", "0") else f"{head}.{tail}"
    if not re.fullmatch(r"\d+(\.\d+)?|\.\d+", s):
        raise AnswerError(f"cannot read {text.strip()!r} as a number")
    digits = s.replace(".", "").lstrip("0")
    if "." not in s:
        digits = digits.rstrip("0") or digits
    return float(s), max(1, len(digits))


def _grouped(text: str, mark: str) -> str:
    """'1,234,567' → '1234567'; groups after the first must be three digits."""
    first, *rest = text.split(mark)
    if not rest or not re.fullmatch(r"\d{1,3}", first) or any(len(g) != 3 for g in rest):
        raise AnswerError(f"cannot read {text!r} as a number")
    return first + "".join(rest)


def read_answer(text: str, unit: str) -> dict[str, Any]:
    """What a learner typed, in the drill's unit: {value, digits, unit_given, unitless}."""
    m = _ANSWER.match(text or "")
    if not m:
        raise AnswerError(f"cannot read {(text or '').strip()!r} as a number")
    value, digits = parse_number(m.group(1))
    given = m.group(2)
    factor = BYTE_UNITS.get(unit.lower())
    if not given:
        return {"value": value, "digits": digits, "unit_given": unit, "unitless": True}
    g = BYTE_UNITS.get(given.lower())
    if factor is not None and g is not None:
        return {
            "value": value * g / factor,
            "digits": digits,
            "unit_given": given,
            "unitless": False,
        }
    if factor is None and g is None:  # a count ("50 sequences", "50 users")
        return {"value": value, "digits": digits, "unit_given": unit, "unitless": False}
    raise AnswerError(f"the answer is in {unit}; {given!r} is not a unit of that")


def _round_sig(x: float, digits: int) -> float:
    if x == 0:
        return 0.0
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def is_right(value: float, digits: int, truth: float, tolerance: float) -> bool:
    """Within the drill's tolerance (set from the lesson's own rounding), or the truth rounded
    to as many significant digits as the learner gave (at least two): 1.13, 1129 and 17 are
    all right answers for 1.1288 TB and 17.18 GB."""
    if abs(value - truth) <= tolerance * abs(truth):
        return True
    return digits >= 2 and math.isclose(_round_sig(truth, digits), value, rel_tol=1e-9)


def _format(value: Any, how: str, units: str) -> str:
    if value is None:
        return "?"
    if how == "gb":
        return format_bytes(value, units)
    if how == "tb":
        return f"{value / 10**12:,.2f} TB"
    if how == "int":
        return f"{int(value):,}"
    return str(value)


def fill(template: str, data: dict[str, Any], extra: dict[str, Any]) -> str:
    """ "{path:how}" placeholders → the engine's figures (how: gb, tb, int or raw)."""

    def one(m: re.Match[str]) -> str:
        path, _, how = m.group(1).partition(":")
        value = extra[path] if path in extra else pick(data, path)
        return _format(value, how, str(data.get("units") or "GB"))

    return re.sub(r"\{([^{}]+)\}", one, template)


def _show(value: float, unit: str) -> str:
    if unit.lower() in BYTE_UNITS:
        return f"{value:,.2f} {unit}"
    return f"{value:,.0f} {unit}" if value == int(value) else f"{value:,.2f} {unit}"


def check(step_id: int, answer: str) -> dict[str, Any]:
    steps = {int(s["id"]): s for s in lesson()["steps"]}
    step = steps.get(step_id)
    if step is None or not step.get("drill"):
        raise GpuplanError(f"step {step_id} has no drill")
    drill = step["drill"]
    unit = str(drill.get("unit") or "")
    data = run_body(step["scenario"])
    paths = (
        drill["answer_from"] if isinstance(drill["answer_from"], list) else [drill["answer_from"]]
    )
    values = [pick(data, p) for p in paths]
    if any(not isinstance(v, int | float) for v in values):
        raise GpuplanError("the engine's answer does not include this figure")
    raw = sum(values)
    factor = BYTE_UNITS.get(unit.lower(), 1)
    truth = raw / factor
    tolerance = float(drill.get("tolerance", 0.01))
    out: dict[str, Any] = {
        "step": step_id,
        "unit": unit,
        "truth": truth,
        "truth_text": _show(truth, unit),
        "tolerance": tolerance,
        "arithmetic": [fill(t, data, {"answer": raw}) for t in drill.get("arithmetic", [])],
    }
    try:
        given = read_answer(answer, unit)
    except AnswerError as err:
        return {**out, "status": "unreadable", "right": False, "message": str(err)}
    value = given["value"]
    right = is_right(value, given["digits"], truth, tolerance)
    out.update(
        status="right" if right else "wrong",
        right=right,
        given=value,
        given_text=_show(value, unit),
        read_as=(
            None
            if given["unitless"] or given["unit_given"] == unit
            else f"{answer.strip()} = {_show(value, unit)}"
        ),
    )
    if not right and given["unitless"] and unit in NEIGHBOURS:
        smaller, larger = NEIGHBOURS[unit]
        for scale, other in ((10**-3, smaller), (10**3, larger)):
            if other and is_right(value * scale, given["digits"], truth, tolerance):
                out["hint"] = f"{answer.strip()} {other} would be right: write the unit"
    return out


# --- routes ----------------------------------------------------------------------------------


# The engine work runs in the web server's worker pool (web/pool.py: bounded, budgeted, stopped
# when the client goes away); these are the jobs it runs, by name in web/compute.py JOBS.


def compare_job(body: dict[str, Any]) -> dict[str, Any]:
    return run_compare(CompareRequest.model_validate(body))


def change_job(body: dict[str, Any]) -> dict[str, Any]:
    return run_change(ChangeRequest.model_validate(body))


def check_job(body: dict[str, Any]) -> dict[str, Any]:
    req = CheckRequest.model_validate(body)
    return check(req.step, req.answer)


@router.post("/compare", summary="Headlines of a base request and its variants, side by side")
async def compare_endpoint(body: CompareRequest, request: Request) -> Response:
    return await request.app.state.engine.answer(request, "lesson.compare", body)


@router.post("/change", summary="What changed between two requests' bills")
async def change_endpoint(body: ChangeRequest, request: Request) -> Response:
    return await request.app.state.engine.answer(request, "lesson.change", body)


@router.post("/check", summary="Check a drill answer against the engine")
async def check_endpoint(body: CheckRequest, request: Request) -> Response:
    return await request.app.state.engine.answer(request, "lesson.check", body)
