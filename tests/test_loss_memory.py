"""Reference test: the loss's peak (engine/loss.py) against PyTorch's MemTracker on the CPU.

bf16 logits of T tokens run through F.cross_entropy(logits.float()) and its backward under
`torch.distributed._tools.mem_tracker.MemTracker`, plainly and under DTensor loss parallelism
(`torch.distributed.tensor.parallel.loss_parallel`, vocabulary sharded over a fake process group
of 4 ranks). The test holds the logits throughout, so the tracker's peak is gpuplan's backward
peak plus the logits (a·T·V'), within 1 %.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuplan.engine.loss import LossSpec, loss_memory  # noqa: E402

pytestmark = pytest.mark.reference

WORLD, TOKENS, VOCAB = 4, 512, 4000


@pytest.fixture(scope="module")
def mesh():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    yield init_device_mesh("cpu", (WORLD,))
    dist.destroy_process_group()


def _peak(mode: str, mesh) -> tuple[int, int]:
    """(MemTracker's peak, the vocabulary per rank) for one cross entropy and its backward."""
    import contextlib

    import torch.nn.functional as F
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import loss_parallel

    gen = torch.Generator().manual_seed(0)
    full = torch.randn(TOKENS, VOCAB, dtype=torch.bfloat16, generator=gen)
    labels = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    if mode == "loss_parallel":
        vocab = VOCAB // WORLD
        logits = DTensor.from_local(full[:, :vocab].clone(), mesh, [Shard(1)]).requires_grad_()
        target = DTensor.from_local(labels, mesh, [Replicate()])
        ctx = loss_parallel()
    else:
        vocab, logits, target, ctx = VOCAB, full.clone().requires_grad_(), labels, None
    tracker = MemTracker()
    tracker.track_external(logits)
    with tracker, ctx or contextlib.nullcontext():
        F.cross_entropy(logits.float(), target).backward()
    snapshot = tracker.get_tracker_snapshot("peak")
    device = next(d for d in snapshot if str(d) == "cpu")
    return snapshot[device]["Total"], vocab


@pytest.mark.parametrize("mode", ["standard", "loss_parallel"])
def test_loss_peak_matches_memtracker(mode, mesh):
    measured, vocab = _peak(mode, mesh)
    model = loss_memory(LossSpec(mode), TOKENS, vocab, 64, 2)
    expected = model.backward + 2 * TOKENS * vocab  # the held logits
    assert abs(expected - measured) <= 0.01 * measured, (mode, measured, expected)
