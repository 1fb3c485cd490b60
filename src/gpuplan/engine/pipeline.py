"""The pipeline schedule: how many forward passes a pipeline rank holds, and its idle time.

1F1B (Narayanan et al. 2021 §2.2.1; Megatron-LM pipeline_parallel/schedules.py
`forward_backward_pipelining_without_interleaving`): rank r runs pp − r − 1 warm-up forwards, then
alternates one forward and one backward, so it holds the activations of min(pp − r, m) micro-batches
(Korthikanti et al. 2022 §4.2.3: the first stage holds pp of them).

Interleaved 1F1B (Narayanan et al. 2021 §2.2.2; schedules.py
`forward_backward_pipelining_with_interleaving`): each rank holds vpp model chunks and a "forward"
is one micro-batch through one chunk. Rank r runs 2·(pp − r − 1) + (vpp − 1)·pp warm-up forwards
(all m·vpp of them when m = pp), then one more before its first backward, so it holds

    min(2·(pp − r − 1) + (vpp − 1)·pp + 1, m·vpp)     chunk forwards,

each of layers ÷ (pp·vpp) layers, the group of pp micro-batches per chunk being Megatron's default
`microbatch_group_size_per_vp_stage` and PyTorch's `microbatches_per_round`
(torch/distributed/pipelining/schedules.py `_get_warmup_ops`; Megatron-LM releases before 2024
ran every forward first when m = pp). The last chunk (LM head, loss) has one forward in flight at
a time. For the first rank that is pp + (pp − 1)/vpp micro-batches'
worth of its whole stage: the price of a bubble vpp times smaller, (pp − 1) ÷ (vpp·m).
"""

from __future__ import annotations


def forwards_in_flight(pp: int, vpp: int, rank: int, micro_batches: int) -> int:
    """Forward passes (micro-batch × model chunk) whose activations `rank` holds at its peak."""
    if pp == 1:
        return 1
    if vpp == 1:
        return min(pp - rank, micro_batches)
    warmup = 2 * (pp - rank - 1) + (vpp - 1) * pp
    return min(warmup + 1, micro_batches * vpp)


def last_chunk_forwards(vpp: int, in_flight: int) -> int:
    """Forwards of the last chunk (the LM head and the loss) alive on the last rank at its peak:
    one under interleaving, where each is followed at once by its backward; `in_flight` without."""
    return in_flight if vpp == 1 else 1


def bubble_fraction(pp: int, vpp: int, micro_batches: int) -> float:
    """Idle time ÷ ideal compute time: (pp − 1) ÷ (vpp · m) (Narayanan et al. 2021 §2.2)."""
    return (pp - 1) / (vpp * micro_batches) if pp > 1 else 0.0
