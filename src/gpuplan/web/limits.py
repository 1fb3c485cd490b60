"""What one web request may cost: a work budget checked before any work, and a bounded cache.

The budget counts work units, deterministically from the request alone: plans in the request
(a sweep's values, a lesson comparison's variants; 1 otherwise) × the search each plan runs (a
fixed layout is one bill; a search for the fewest GPUs walks GPU counts and, for training, the
layouts of each; fixes add about one more search) × the model's depth in blocks of
LAYERS_PER_UNIT layers (a bill's cost grows with the layer count). A request over the budget is
refused at once with 422 and how to narrow it. The weights follow measured costs on the 2-core
development machine (a training search for DeepSeek-R1 on A10Gs, the worst catalog case, takes
1-4 s; a serving search up to 0.3 s; a fixed layout milliseconds), so the budget admits what the
page and the lesson ask (8 training searches) and refuses the issue's 64-point training sweep
(tests/test_web_api.py::test_the_heavy_sweep_is_refused_at_once); the pool's deadline (10 s)
stops anything the estimate lets through that runs longer.

The cache keeps answers already computed, keyed by the normalised request (the validated body
with defaults filled in, the catalog name in its canonical spelling), bounded in entries and bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from pydantic import ValidationError

from gpuplan.web.schema import ServeRequest, SweepRequest, TrainRequest

WORK_BUDGET = 2048
LAYERS_PER_UNIT = 256
POINT_COST = {
    # (mode, searches for the fewest GPUs) -> work units per point
    ("serve", False): 1,
    ("serve", True): 8,
    ("train", False): 4,
    ("train", True): 256,
}


# a speed simulation (api/serving_speed.py): up to 4 × 8,192 requests, measured at 0.1-0.4 s
# on the development machine for 8B-70B at up to 1,024 users in flight: a serving search's cost
SPEED_COST = POINT_COST["serve", True]


class TooMuchWork(Exception):
    """The request's estimate is over WORK_BUDGET; the message says how to narrow it."""


def _depth_factor(body: ServeRequest | TrainRequest) -> int:
    layers = body.layers() or 1
    return max(1, -(-layers // LAYERS_PER_UNIT))


def plan_units(body: ServeRequest | TrainRequest, searches: bool | None = None) -> int:
    """One plan's cost: its search (or one layout), and the fixes it may look for (about one
    more search: a plan that does not fit tries cheaper formats, bigger GPUs, more GPUs)."""
    mode = "serve" if isinstance(body, ServeRequest) else "train"
    searches = body.searches() if searches is None else searches
    units = POINT_COST[mode, searches] + (POINT_COST[mode, True] if body.fixes else 0)
    if getattr(body, "speed", None) is not None:
        units += SPEED_COST
    return units * _depth_factor(body)


def _mode_body(body: Any) -> ServeRequest | TrainRequest | None:
    """A lesson body ({mode, ...a serve or train body}) as its request; None if it is not one
    (it will be refused at once, at no cost)."""
    if not isinstance(body, dict):
        return None
    fields = {k: v for k, v in body.items() if k != "mode"}
    model = TrainRequest if body.get("mode") == "train" else ServeRequest
    try:
        return model.model_validate({**fields, "fixes": False})
    except ValidationError:
        return None


def work_units(kind: str, body: Any) -> tuple[int, str]:
    """The request's cost in work units, and what it is made of (for the refusal message)."""
    if isinstance(body, SweepRequest):
        base = body.base_request()
        searches = base.searches() and body.vary != "gpus"
        per_point, points = plan_units(base, searches), len(body.values)
        search = "a search for the fewest GPUs" if searches else "one layout"
        return points * per_point, f"{points} points × {search} ({per_point} units each)"
    if kind in ("lesson.compare", "lesson.change"):
        bodies = (
            [body.base, *({**body.base, **v} for v in body.variants)]
            if kind == "lesson.compare"
            else [body.before, body.after]
        )
        plans = [p for p in map(_mode_body, bodies) if p is not None]
        return sum(map(plan_units, plans)), f"{len(bodies)} plans"
    if isinstance(body, ServeRequest | TrainRequest):
        return plan_units(body), "1 plan" + (" with a search" if body.searches() else "")
    return 1, "1 answer"  # a drill check: one fixed lesson scenario


def check_budget(kind: str, body: Any) -> None:
    units, what = work_units(kind, body)
    if units > WORK_BUDGET:
        per_point = max(1, units // (len(body.values) if isinstance(body, SweepRequest) else 1))
        if isinstance(body, SweepRequest):
            hint = f"sweep at most {max(1, WORK_BUDGET // per_point)} values, or give gpus"
        elif kind.startswith("lesson."):
            hint = "compare fewer variants, or give gpus"
        else:
            hint = "give gpus (or tp/pp), fixes: false, or a smaller model"
        raise TooMuchWork(
            f"too much work for one request: {what} = {units:,} units > {WORK_BUDGET:,}; {hint}"
        )


def cache_key(kind: str, body: Any, canonical_model: str | None) -> str:
    """A digest of the request as the engine will see it."""
    data = body.model_dump(mode="json")
    if canonical_model is not None:
        data["model"] = canonical_model
    text = json.dumps([kind, data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class AnswerCache:
    """Least-recently-used answers: at most `entries` of them and `max_bytes` in all."""

    def __init__(self, entries: int = 256, max_bytes: int = 32 * 2**20) -> None:
        self.entries, self.max_bytes = entries, max_bytes
        self._items: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[int, bytes] | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: str, status: int, body: bytes) -> None:
        if len(body) > self.max_bytes // 8:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._items[key] = (status, body)
            self._bytes += len(body)
            while len(self._items) > self.entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= len(dropped)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes
