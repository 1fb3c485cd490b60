"""The three answers for a model that does not fit (fewer bytes, a bigger GPU, more GPUs), shown
by the CLI for serving and training: `serve --gpus N`, `train`, `plan` and `plan --train`.

Each answer is checked by applying its change and asking again (one click); the arithmetic that
makes the starting plans fail is derived here: bf16 weights are 2 bytes per parameter, and bf16
AdamW holds 16 bytes of model states per parameter (the lesson).
"""

import json

import pytest

from gpuplan.api import serve, train
from gpuplan.api.answers import serving_answers, three_answers
from gpuplan.api.train_answers import training_answers, training_three_answers
from gpuplan.cli.main import main
from gpuplan.planner.fixes import serving_fixes, training_fixes

GB = 10**9
THREE = ["fewer bytes", "bigger GPU", "more GPUs"]


def _run(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_serve_that_does_not_fit_shows_the_three_answers(capsys):
    # Llama-3.1-70B in bf16: 70.6 B × 2 bytes = 141 GB of weights, over one 80 GB H100
    ask = {"model": "llama-3.1-70b", "gpu": "h100", "gpus": 1}
    plan = serve(**ask)
    assert plan.params_total * 2 > 80 * GB and not plan.fits
    code, out, _ = _run(capsys, "serve", "llama-3.1-70b", "--gpus", "1")
    assert code == 0 and "does not fit" in out and "Ways out" in out
    for answer in THREE:
        assert answer in out
    assert "--dtype fp8" in out  # the option that gives the first answer
    code, out, _ = _run(capsys, "serve", "llama-3.1-70b", "--gpus", "1", "--json")
    data = json.loads(out)
    assert [f["answer"] for f in data["fixes"]] == THREE
    for fix in data["fixes"]:  # each is one click away: the changed ask fits
        again = serve(**{**ask, **fix["change"]})
        assert again.fits and again.per_gpu_total_bytes == fix["per_gpu_total_bytes"]


def test_serve_that_fits_has_no_fixes(capsys):
    code, out, _ = _run(capsys, "serve", "llama-3.1-8b", "--json")
    assert code == 0 and json.loads(out)["fixes"] == []
    code, out, _ = _run(capsys, "serve", "llama-3.1-8b")
    assert "Ways out" not in out


def test_train_that_does_not_fit_shows_the_answers(capsys):
    # Llama-3.1-8B, plain data parallelism on one GPU: 8.03 B × 16 bytes = 128 GB of states
    ask = {"model": "llama-3.1-8b", "gpu": "h100", "gpus": 1, "zero": 0}
    plan = train(**ask)
    assert plan.params_total * 16 > 80 * GB and not plan.fits
    code, out, _ = _run(capsys, "train", "llama-3.1-8b", "--gpus", "1", "--zero", "0")
    assert code == 0 and "Ways out" in out
    code, out, _ = _run(capsys, "train", "llama-3.1-8b", "--gpus", "1", "--zero", "0", "--json")
    fixes = json.loads(out)["fixes"]
    assert [f["answer"] for f in fixes] == THREE
    assert fixes[0]["kind"] == "lora"  # one GPU: nothing to shard, adapters cut the states
    for fix in fixes:
        again = train(**{**ask, **fix["change"]})
        assert again.fits


def test_plan_shows_the_answers_when_nothing_meets_the_ask(capsys):
    # Llama-3.1-405B in bf16 (810 GB of weights) on at most 4 × 80 GB H100s
    code, out, _ = _run(
        capsys, "plan", "llama-3.1-405b", "--gpu", "h100", "--dtype", "bf16", "--max-gpus", "4"
    )
    assert code == 0 and "nothing meets the ask" in out
    code, out, _ = _run(
        capsys,
        "plan",
        "llama-3.1-405b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--max-gpus",
        "4",
        "--json",
    )
    data = json.loads(out)
    assert data["options"] == []
    answers = [f["answer"] for f in data["fixes"]]
    assert "more GPUs" in answers and "fewer bytes" in answers
    more = next(f for f in data["fixes"] if f["answer"] == "more GPUs")
    assert more["gpus"] > 4  # measured from the cap the plan was given


def test_plan_train_that_fits_nowhere_shows_the_answers(capsys):
    # 32k-token sequences of an 8B model on one 16 GB T4: nothing fits, even fully recomputed
    args = ["plan", "llama-3.1-8b", "--train", "--gpus", "1", "--gpu", "t4", "--seq", "32768"]
    code, out, err = _run(capsys, *args)
    assert code == 2 and "no layout" in err
    assert "Ways out" in out and "more GPUs" in out


@pytest.mark.parametrize(("flag", "value"), [("--users", "4"), ("--context", "8192")])
def test_plan_train_refuses_serving_asks(capsys, flag, value):
    code, _, err = _run(capsys, "plan", "llama-3.1-8b", "--train", flag, value)
    assert code == 2 and flag in err and "serving" in err


def test_the_api_answers_are_thin_wrappers_over_fixes():
    ask = {"model": "llama-3.1-70b", "gpu": "h100", "gpus": 1, "context": 4096}
    plan = serve(**ask)
    fixes = serving_fixes(ask, plan, serve)
    answers = three_answers("llama-3.1-70b", "h100", gpus=1, context=4096)
    assert answers == serving_answers(ask, plan)
    assert [a["kind"] for a in answers] == [f.answer for f in fixes]
    assert [a["change"] for a in answers] == [f.change for f in fixes]

    t_ask = {"model": "llama-3.1-8b", "gpu": "h100", "gpus": 1, "zero": 0}
    t_plan = train(**t_ask)
    t_fixes = training_fixes(t_ask, t_plan, train)
    t_answers = training_three_answers("llama-3.1-8b", "h100", gpus=1, zero=0)
    assert t_answers == training_answers(t_ask, t_plan)
    assert [a["kind"] for a in t_answers] == [f.answer for f in t_fixes]
