"""`gpuplan plan`: rank the layouts that fit, and export a launch command for an engine.

The options are the table's (`cli/specs.py` PLAN_OPTIONS, read by the fast path too) and the
work is `cli/plan_run.py`'s; serving by default (vLLM/SGLang commands), with `--train` the
training layouts of a GPU count (`cli/plan_train.py`: DeepSpeed, FSDP or Megatron-LM configs).
"""

from __future__ import annotations

from typing import Any

import click

from gpuplan.cli import specs
from gpuplan.cli.options import click_options
from gpuplan.cli.plan_run import SERVING_ENGINES, TRAINING_ENGINES, run_plan

__all__ = ["SERVING_ENGINES", "TRAINING_ENGINES", "plan_command"]


@click.command("plan")
@click.argument("model")
@click_options(specs.PLAN_OPTIONS)
def plan_command(model: str, **values: Any) -> None:
    """Rank the ways to serve MODEL to --users users within --tpot and --ttft: per GPU type and
    weight format, the best layout (tp, pp, expert parallelism) and number of replicas.

    With --train: rank the training layouts of --gpus GPUs that fit, fastest first; with
    --tokens (and --days), the fewest GPUs per GPU type that train that many tokens in time.
    """
    ctx = click.get_current_context()
    given = {
        name
        for name in values
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    }
    run_plan(model, values, given)
