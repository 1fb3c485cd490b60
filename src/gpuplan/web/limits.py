"""What one web request may cost: a work budget checked before any work, and a bounded cache.

The budget counts work units, deterministically from the request alone: points in the request
(a sweep's values; 1 otherwise) × the search each point runs (a fixed layout is one bill; a
search for the fewest GPUs walks GPU counts and, for training, the layouts of each) × the model's
depth in blocks of LAYERS_PER_UNIT layers (a bill's cost grows with the layer count). A request
over the budget is refused at once with 422 and how to narrow it. The weights are calibrated so
that the heaviest request inside the budget takes about a second on one core (see
tests/test_fuzz_web.py::test_the_heavy_sweep_is_refused_at_once); the pool's deadline (5 s)
backs this up for anything the estimate misses.

The cache keeps answers already computed, keyed by the normalised request (the validated body
with defaults filled in, the catalog name in its canonical spelling), bounded in entries and bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from gpuplan.web.schema import ServeRequest, SweepRequest, TrainRequest

WORK_BUDGET = 512
LAYERS_PER_UNIT = 256
POINT_COST = {
    # (mode, searches for the fewest GPUs) -> work units per point
    ("serve", False): 1,
    ("serve", True): 8,
    ("train", False): 4,
    ("train", True): 256,
}
FIXES_COST = 4  # a serving plan that does not fit looks for fixes: a few more plans


class TooMuchWork(Exception):
    """The request's estimate is over WORK_BUDGET; the message says how to narrow it."""


def _depth_factor(body: ServeRequest | TrainRequest) -> int:
    layers = body.layers() or 1
    return max(1, -(-layers // LAYERS_PER_UNIT))


def work_units(kind: str, body: Any) -> tuple[int, str]:
    """The request's cost in work units, and what it is made of (for the refusal message)."""
    if isinstance(body, SweepRequest):
        base = body.base_request()
        points = len(body.values)
        searches = base.searches() and body.vary != "gpus"
    else:
        base, points, searches = body, 1, body.searches()
    mode = "serve" if isinstance(base, ServeRequest) else "train"
    per_point = POINT_COST[mode, searches] * _depth_factor(base)
    if isinstance(base, ServeRequest) and base.fixes and kind != "sweep":
        per_point *= FIXES_COST
    search = "a search for the fewest GPUs" if searches else "one layout"
    what = f"{points} point{'s' if points > 1 else ''} × {search} ({per_point} units each)"
    return points * per_point, what


def check_budget(kind: str, body: Any) -> None:
    units, what = work_units(kind, body)
    if units > WORK_BUDGET:
        per_point = max(1, units // (len(body.values) if isinstance(body, SweepRequest) else 1))
        hint = (
            f"sweep at most {max(1, WORK_BUDGET // per_point)} values, or give gpus"
            if isinstance(body, SweepRequest)
            else "give gpus (or tp/pp), or a smaller model"
        )
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
