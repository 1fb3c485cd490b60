"""The training goal planner's GPU counts, fixed global batch and default GPU types (issue 21
item 4), and `train --gpus auto`'s whole-server rule."""

import gpuplan
from gpuplan.api.training_plans import plan_training_goal
from gpuplan.planner.training_goals import DEFAULT_GOAL_BATCH_TOKENS, gpu_counts


def test_counts_are_any_within_a_server_and_whole_servers_beyond():
    assert gpu_counts(8, 40) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40]
    assert gpu_counts(72, 216) == [*range(1, 73), 144, 216]


def test_deadline_is_met_without_rounding_up_to_a_power_of_two():
    option = plan_training_goal("llama-3.1-70b", tokens="1T", days=40, gpus=["a100-80gb"])[0]
    t = option.time
    assert t.days <= 40
    assert t.gpus % 8 == 0
    # about what meets the deadline: within eight servers of linear scaling from the answer
    # (a power-of-two count, 1,024, would finish in well under 40 × 960 / 1,024 days)
    assert t.days > 40 * (t.gpus - 64) / t.gpus
    assert "whole servers" in option.count_rule


def test_global_batch_is_fixed_whatever_the_gpu_count():
    small = plan_training_goal("llama-3.1-8b", tokens="100B", days=60, gpus=["h100"])[0]
    big = plan_training_goal("llama-3.1-8b", tokens="100B", days=2, gpus=["h100"])[0]
    assert big.time.gpus > small.time.gpus
    for o in (small, big):
        assert o.plan.bill.setup.tokens_per_step == DEFAULT_GOAL_BATCH_TOKENS
        assert "default" in o.batch_note
    given = plan_training_goal(
        "llama-3.1-8b", tokens="100B", days=60, gpus=["h100"], global_batch_tokens=2**21
    )[0]
    assert given.plan.bill.setup.tokens_per_step == 2**21
    assert "given" in given.batch_note


def test_every_default_gpu_type_with_a_complete_entry_is_ranked():
    ranked = plan_training_goal("llama-3.1-8b", tokens="1T", days=30)
    ranked_gpus = {o.time and o.plan.bill.setup.gpu.id for o in ranked}
    # every default type has a complete entry since the catalog's round 2 (MI300X: its xGMI links)
    assert {"h100-sxm", "h200", "b200", "a100-80gb", "l40s", "mi300x"} <= ranked_gpus
    assert ranked[0].left_out == ()


def test_auto_gpus_says_beyond_one_server_whole_servers():
    plan = gpuplan.train("llama-3.1-70b", "h100", gpus="auto")
    assert plan.bill.setup.layout.gpus == 16
    reasons = [a.reason for a in plan.search if not a.fits]
    assert any("whole servers" in r for r in reasons)
