"""`gpuplan plan`'s work, from its options' values (no click: cli/plan.py's command and the fast
path, cli/fast.py, both call `run_plan`).

Serving by default (vLLM/SGLang commands); with `--train`, the training layouts of a GPU count
(`cli/plan_train.py`: DeepSpeed, FSDP or Megatron-LM configs).
"""

from __future__ import annotations

from typing import Any

from gpuplan.cli.jsonout import print_json
from gpuplan.errors import GpuplanError

SERVING_ENGINES = ("vllm", "sglang")
TRAINING_ENGINES = ("deepspeed", "fsdp", "megatron")
DEPLOY_TARGETS = ("k8s", "kserve", "skypilot", "ray")  # planner/deploy: manifests
# the options only a training plan takes (--gpu-memory also with --matrix)
TRAINING_OPTIONS = (
    "gpu_count",
    "seq",
    "global_batch_tokens",
    "recipe",
    "lora_rank",
    "qlora",
    "gpu_memory",
    "tokens",
    "days",
    "mfu",
)


def run_plan(model: str, values: dict[str, Any], given: set[str]) -> None:
    """Print the plan for MODEL from the options' values by destination; `given`: the
    destinations the user typed (a serving ask typed with --train is refused)."""
    v = dict(values)
    training = {k: v[k] for k in TRAINING_OPTIONS if v[k] is not None and v[k] is not False}
    deploy = v["engine"] if v["engine"] in DEPLOY_TARGETS else None
    if v["run_engine"] is not None and deploy is None:
        raise GpuplanError("--engine: with --export k8s|kserve|skypilot|ray (what it runs)")
    if deploy:
        v["engine"] = v["run_engine"]
    v["deploy"] = deploy
    goal: dict[str, Any] = {
        "objective": v["objective"],
        "prices": v["prices"],
        "max_gpus": v["max_gpus"],
    }
    pin = {k: v[k] for k in ("tp", "pp", "ep") if v[k] is not None}
    if pin and (v["train"] or v["matrix"]):
        raise GpuplanError(
            "--tp/--pp/--ep pin a serving plan's replica layout; not with --train or --matrix"
        )
    if v["train"]:
        if v["calibration"]:
            raise GpuplanError("--calibration calibrates serving speed; --train does not use it")
        _refuse_serving_asks(v, given)
        _plan_training(model, v, training, goal)
        return
    if v["engine"] in TRAINING_ENGINES:
        flag = "engine" if deploy else "export"
        raise GpuplanError(f"--{flag} {v['engine']} is a training engine; add --train")
    gpu_memory = _serving_gpu_memory(training)
    if deploy and v["matrix"]:
        raise GpuplanError(f"--export {deploy}: a manifest is for one plan, not a --matrix")
    if v["matrix"]:
        _serving_matrix(model, v, gpu_memory)
        return
    if gpu_memory is not None:
        raise GpuplanError("--gpu-memory: with --train or --matrix (a ranking compares GPU types)")
    from gpuplan.api.plan_data import serving_plan_data
    from gpuplan.cli.plan_render import render_serving_plans

    manifest = None
    if deploy:  # the deployment code loads only for a manifest
        from gpuplan.api.manifests import serving_manifest_for

        manifest = serving_manifest_for(deploy, v["engine"] or "vllm")

    data = serving_plan_data(
        model,
        gpus=v["gpus"],
        dtypes=v["dtypes"],
        kv_dtype=v["kv_dtype"],
        context=v["context"],
        users=v["users"],
        headroom=v["headroom"],
        tpot=v["tpot"],
        ttft=v["ttft"],
        prompt_tokens=v["prompt_tokens"],
        output_tokens=v["output_tokens"],
        top=v["top"],
        units=v["units"],
        engine=v["engine"] or ("vllm" if deploy else None),
        manifest=manifest,
        calibration=_calibration(v["calibration"]),
        pin=pin,
        **goal,
    )
    if v["as_json"]:
        print_json(data)
        return
    if "manifest" in data:
        print(data["manifest"]["text"], end="")
        return
    render_serving_plans(data, v["units"], v["as_csv"])


def _refuse_serving_asks(v: dict[str, Any], given: set[str]) -> None:
    """--train sizes a training step: the serving targets and asks (given, not defaulted) are
    refused with the training option to use instead."""
    for flag, key in (
        ("--tpot", "tpot"),
        ("--ttft", "ttft"),
        ("--prompt", "prompt_tokens"),
        ("--output", "output_tokens"),
    ):
        if v[key] is not None:
            raise GpuplanError(f"{flag} is a serving target; --train plans to --tokens/--days")
    for name, instead in (("context", "--seq"), ("users", "--global-batch-tokens")):
        if name in given:
            raise GpuplanError(
                f"--{name} is a serving ask; --train sizes a training step: give {instead}"
            )


def _serving_gpu_memory(given: dict[str, Any]) -> Any:
    """The one training option a serving plan takes (--gpu-memory); any other is refused."""
    gpu_memory = given.pop("gpu_memory", None)
    if given:
        flags = ", ".join("--" + k.replace("_", "-").replace("gpu-count", "gpus") for k in given)
        raise GpuplanError(f"{flags}: only with --train")
    return gpu_memory


def _serving_matrix(model: str, v: dict[str, Any], gpu_memory: Any) -> None:
    """`plan --matrix`: memory per GPU over context × users, for one GPU type and format."""
    from gpuplan.api.plan_matrix import serving_budget_matrix
    from gpuplan.cli.plan_render import render_matrix

    gpus, dtypes = v["gpus"], v["dtypes"]
    if len(gpus) > 1 or len(dtypes) > 1:
        raise GpuplanError("--matrix takes one --gpu and one --dtype")
    data = serving_budget_matrix(
        model,
        gpus[0] if gpus else "h100",
        dtype=dtypes[0] if dtypes else None,
        kv_dtype=v["kv_dtype"],
        headroom=v["headroom"],
        gpu_memory=gpu_memory,
    )
    render_matrix(data, v["units"], v["as_json"], v["as_csv"])


def _plan_training(
    model: str, v: dict[str, Any], given: dict[str, Any], goal: dict[str, Any]
) -> None:
    from gpuplan.cli.plan_train import run_plan_training, run_training_goal, run_training_matrix

    engine, gpus, units, deploy = v["engine"], v["gpus"], v["units"], v["deploy"]
    if engine in SERVING_ENGINES:
        raise GpuplanError(
            f"--{'engine' if deploy else 'export'} {engine} is a serving engine; with --train"
            f" use {', '.join(TRAINING_ENGINES)}"
        )
    if deploy and v["matrix"]:
        raise GpuplanError(f"--export {deploy}: a manifest is for one plan, not a --matrix")
    if len(gpus) > 1 and "tokens" not in given:
        raise GpuplanError("--train plans one GPU type: give a single --gpu (or plan to --tokens)")
    if v["dtypes"] or v["kv_dtype"]:
        raise GpuplanError("--dtype and --kv-dtype are serving options; --train uses --recipe")
    options: dict[str, Any] = {"headroom": v["headroom"]}
    for key, value in given.items():
        options["gpus" if key == "gpu_count" else key] = value
    as_json, as_csv, top = v["as_json"], v["as_csv"], v["top"]
    if v["matrix"]:
        run_training_matrix(model, gpus[0] if gpus else "h100", options, units, as_json, as_csv)
        return
    if "tokens" in options or "days" in options:
        if deploy:
            raise GpuplanError(
                f"--export {deploy}: give the plan's --gpus (a manifest is for one GPU count),"
                " not --tokens/--days"
            )
        if "tokens" not in options:
            raise GpuplanError("--days needs --tokens: how many tokens to train")
        run_training_goal(model, gpus, options, goal, top, units, as_json, as_csv)
        return
    run_plan_training(
        model, gpus[0] if gpus else "h100", options, engine, top, units, as_json, deploy
    )


def _calibration(path: str | None) -> Any:
    """--calibration FILE's fitted speed figures (the calibration reader loads only with it)."""
    if path is None:
        return None
    from gpuplan.api.calibration import load_calibration

    return load_calibration(path)
