"""Write src/gpuplan/web/static/lesson.json: the guided lesson as data. Run after editing.

    python tools/make_lesson.py            # write it
    python tools/make_lesson.py --check    # exit 1 if the file differs from what this writes

Every figure in a step's text is the engine's, computed here when the file is written (so the
text cannot drift from the picture); tests/test_make_lesson.py checks the file is current.

A step: `scenario` is a /api/serve or /api/train body plus `mode` (the lesson counts each GPU at
its marketed memory, `gpu_memory: "marketed"`: 80 GB for an H100); `controls` are the controls the
step uses (shown and highlighted; the rest one click away); `explore` lists the variants of the
scenario the step's question visits (the picture's vertical scale holds them all, and the
headline compares them); `headlines` name the figures the picture puts first; a `drill` is
checked by POST /api/lesson/check against the field(s) `answer_from` of the engine's answer.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import gpuplan
from gpuplan.catalog import get_gpu
from gpuplan.catalog.models import _catalog_config

OUT = Path(__file__).resolve().parent.parent / "src/gpuplan/web/static/lesson.json"
MEMORY = "marketed"  # the lesson's convention: "eight H100s with 80 GB of HBM each"
H100 = {"gpu": "h100-sxm", "gpu_memory": MEMORY, "server_gpus": 8}


def gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def gb0(n: float) -> str:
    return f"{n / 1e9:,.0f} GB"


def count(n: float) -> str:
    return f"{n:,.0f}"


def billions(n: int) -> str:
    return f"{n / 1e9:.2f} B"


def serve_body(**kw: Any) -> dict[str, Any]:
    return {"mode": "serve", **H100, "model": "llama-3.1-8b", "context": 4096, "users": 1, **kw}


def train_body(**kw: Any) -> dict[str, Any]:
    base = {"mode": "train", **H100, "model": "llama-3.1-8b", "micro_batch": 1, "seq": 4096}
    return {**base, **kw}


def S(**kw: Any) -> Any:
    """The engine's serving plan for a lesson scenario (H100 at 80 GB unless said)."""
    kw.setdefault("model", "llama-3.1-8b")
    kw.setdefault("gpu", "h100-sxm")
    overrides = kw.pop("overrides", None)
    if overrides:
        config = {**_catalog_config(kw.pop("model")), **overrides}
        return gpuplan.serve(gpuplan.load_architecture(config, "modified"), gpu_memory=MEMORY, **kw)
    return gpuplan.serve(gpu_memory=MEMORY, **kw)


def T(**kw: Any) -> Any:
    kw.setdefault("model", "llama-3.1-8b")
    kw.setdefault("gpu", "h100-sxm")
    return gpuplan.train(gpu_memory=MEMORY, **kw)


def item(plan: Any, key: str) -> int:
    return int(next(i.bytes for i in plan.items if i.key == key))


def peak_phase(plan: Any) -> dict[str, Any]:
    """The training step's peak phase as the API gives it (`phases`, `peak_phase`)."""
    data = plan.to_dict()
    return dict(next(p for p in data["phases"] if p["name"] == data["peak_phase"]))


def timeline_sentence(plain: Any, full: Any) -> str:
    """Step 17's words for the timeline: where the step peaks without and with recompute."""
    a, b = peak_phase(plain), peak_phase(full)
    if a["name"] == b["name"]:
        where = f"with or without recompute it peaks at the {a['label']}, {gb(a['total_bytes'])} → {gb(b['total_bytes'])}"
    else:
        where = f"without recompute it peaks at the {a['label']} ({gb(a['total_bytes'])}), with it at the {b['label']} ({gb(b['total_bytes'])})"
    logits = item(full, "logits")
    tail = (
        f"; with it the {gb(logits)} of logits outweigh the {gb(full.activations_bytes)} of saved activations"
        if logits > full.activations_bytes
        else ""
    )
    return f"The timeline of phases follows one training step: {where}{tail}."


def category(plan: Any, cat: str) -> int:
    return int(sum(i.bytes for i in plan.items if i.category == cat))


PARTS = {
    1: "Will it fit?",
    2: "Bytes per parameter",
    3: "The KV cache",
    4: "Training: 16 bytes per parameter",
    5: "Dividing the bill",
    6: "Sizing a real request",
    7: "Recap & playground",
}


def steps() -> list[dict[str, Any]]:
    h100, h200, b200 = get_gpu("h100-sxm"), get_gpu("h200"), get_gpu("b200")
    driver = h100.driver_total_bytes or h100.marketed_bytes

    s1 = S(gpus=1)
    s2 = S(model="llama-3.1-70b", gpus=1)
    s2b = S(model="llama-3.1-70b", gpus=2)
    s3 = S(model="llama-3.1-70b", gpus=1, dtype="fp8")
    s3b = S(model="llama-3.1-70b", gpus=1, dtype="int4")
    s4 = S(model="llama-3.1-405b", gpus=8)
    s4b = S(model="llama-3.1-405b", gpus=8, dtype="fp8")
    s5 = S(gpus=1, context=32768)
    s6 = S(model="llama-3.1-70b", gpus=4, context=8192, users=16)
    s6x = S(
        model="llama-3.1-70b",
        gpus=4,
        context=8192,
        users=16,
        overrides={"num_key_value_heads": 64},
    )
    s7 = S(model="llama-3.1-70b", gpus=1, dtype="fp8", users=8)
    s7b = S(model="llama-3.1-70b", gpus=2, dtype="fp8", users=8)
    s8 = S(model="llama-3.1-70b", gpus=4, context=8192)
    t10 = T(gpus=1)
    t11 = T(gpus=8, zero=0)
    t12 = T(gpus=8, zero=0, seq=8192, micro_batch=4, checkpointing="none")
    z = [T(gpus=8, zero=k) for k in range(4)]
    t15 = T(gpus=8, tp=2, zero=1)
    t16a = T(gpus=8, zero=3, seq=4096, checkpointing="none")
    t16 = T(gpus=8, zero=3, seq=8192, checkpointing="none")
    t17 = T(gpus=8, zero=3, seq=16384, checkpointing="none")
    t17b = T(gpus=8, zero=3, seq=16384, checkpointing="full")
    # checkpointing left to the planner, as the page sends it (its "planner's choice")
    t18 = {
        g: T(model="llama-3.1-70b", gpu=g, gpus="auto", zero=3)
        for g in ("h100-sxm", "h200", "b200")
    }
    s19 = S(model="llama-3.1-70b", gpus="auto", context=8192, users=4)
    s19x = S(model="llama-3.1-70b", gpus="auto", context=8192, users=4, headroom=1.0)
    at2 = next(a for a in s19.search if a.gpus == 2)
    s20 = S(model="llama-3.1-405b", gpus=8, context=8192)
    s20f = S(model="llama-3.1-405b", gpus=8, context=8192, dtype="fp8")
    s20h = S(model="llama-3.1-405b", gpus=8, context=8192, gpu="h200")
    t21 = T(model="llama-3.1-70b", gpus=1, zero=0)
    budget = int(0.9 * h100.marketed_bytes)
    n70 = t21.params_total
    bound = math.ceil(t21.model_states_bytes / budget)
    at16 = next(a for a in t18["h100-sxm"].search if a.gpus == 16)
    tps = t17b.tokens_per_second / t17.tokens_per_second - 1
    kv = lambda p: item(p, "kv_cache")  # noqa: E731
    fits2 = (
        "under the 90 % line"
        if s2b.fits
        else f"past the 90 % line ({gb(s2b.budget_bytes)}) but under the {gb0(h100.marketed_bytes)} of HBM"
    )

    return [
        dict(
            part=1,
            title="The question you are always asked",
            text=[
                f"You run one DGX H100: eight H100s with {gb0(h100.marketed_bytes)} of memory each. Two teams ask the same thing: will our model fit, and on how many GPUs?",
                f"Start small: Llama 3.1 8B, {billions(s1.params_total)} parameters, served in bf16 (2 bytes each). On top of the weights sit a workspace, the CUDA context and the KV cache of one 4,096-token conversation.",
            ],
            aside=f"About “80 GB”: NVIDIA sells the H100 as {gb0(h100.marketed_bytes)}; the driver reports {count(driver / 2**20)} MiB = {gb(driver)}. This lesson counts every GPU at its round marketed figure (H200 {gb0(h200.marketed_bytes)}, B200 {gb0(b200.marketed_bytes)}); the playground starts from the driver's figure, what a process can really allocate. Change it under Memory per GPU.",
            question="Predict: how many GB of weights, and how much of the 80 GB does the whole plan use? Then show the plan.",
            reveal=[
                f"{billions(s1.params_total)} parameters × 2 bytes = {gb(item(s1, 'weights'))} of weights. On top sit a {gb(item(s1, 'workspace'))} workspace, {gb(item(s1, 'cuda_context'))} of CUDA context and {gb(item(s1, 'kv_cache'))} of KV cache for one 4,096-token conversation: {gb(s1.per_gpu_total_bytes)} of {gb0(h100.marketed_bytes)}.",
                "Weights in GB ≈ parameters in billions × bytes per parameter. GPU 0 holds the plan; the seven others can run copies of it for more users. Hover a block for its arithmetic.",
            ],
            scenario=serve_body(gpus=1),
            controls=[],
            headlines=["weights", "total"],
        ),
        dict(
            part=1,
            title="The 70B model on one GPU",
            kind="break",
            text=[
                f"Now the support team's model: Llama 3.1 70B, {billions(s2.params_total)} parameters in bf16, on one H100.",
                "Inference reads every weight for every token, so all of them must be resident on the GPUs serving it.",
            ],
            question="Predict: by how much does one GPU overflow? Then give it 2 GPUs, each holding half the weights.",
            reveal=[
                f"{billions(s2.params_total)} × 2 bytes = {gb(item(s2, 'weights'))} of weights against {gb0(h100.marketed_bytes)} of HBM: one GPU is {gb(s2.per_gpu_total_bytes - h100.marketed_bytes)} short.",
                f"On 2 GPUs each holds {gb(item(s2b, 'weights'))} of weights, {gb(s2b.per_gpu_total_bytes)} in all per GPU: {fits2}. Dividing the weights is how a model too big for one GPU fits at all.",
            ],
            scenario=serve_body(model="llama-3.1-70b", gpus=1),
            controls=["gpus"],
            explore=dict(variants=[{"gpus": 1}, {"gpus": 2}], labels=["1 GPU", "2 GPUs"]),
            headlines=["weights", "total"],
        ),
        dict(
            part=2,
            title="Precision is a memory dial",
            text=[
                "Bytes per parameter is the first dial: fp32 4, bf16 2, fp8 1, a 4-bit format about half a byte (plus a little for its scales).",
                "Here the 70B model is in fp8 (1 byte per parameter) on one H100.",
            ],
            question="Predict: how many GB of weights in fp8, and how many 4,096-token users fit once the weights are int4? Then switch the weights to int4.",
            reveal=[
                f"In fp8 the weights are {gb(item(s3, 'weights'))}, half the bf16 size, yet with the workspace and context they pass the 90 % line ({gb(s3.budget_bytes)}).",
                f"In int4 they are {gb(item(s3b, 'weights'))}: the plan fits, with room for {count(s3b.max_concurrent_sequences)} conversations of 4,096 tokens. The KV cache stays in {s3b.to_dict()['kv_dtype']}: the weights' precision does not set the cache's (the KV-cache precision does).",
            ],
            scenario=serve_body(model="llama-3.1-70b", gpus=1, dtype="fp8"),
            controls=["dtype"],
            explore=dict(variants=[{"dtype": "fp8"}, {"dtype": "int4"}], labels=["fp8", "int4"]),
            headlines=["weights", "capacity"],
        ),
        dict(
            part=2,
            title="405B on the whole server",
            kind="break",
            text=[
                "Llama 3.1 405B in bf16, on all eight GPUs. Tensor parallelism splits every layer across them, so each holds an eighth of the weights.",
            ],
            question="Predict: how many GB of weights does each GPU hold, in bf16 and in fp8? Then switch the weights to fp8.",
            reveal=[
                f"Splitting divides the bill but never shrinks it: {gb0(s4.weights_bytes)} ÷ 8 = {gb(item(s4, 'weights'))} per GPU, more than an H100 has.",
                f"In fp8 it is {gb(item(s4b, 'weights'))} per GPU and the server holds it: the weights of all the GPUs together must fit, with room left over.",
            ],
            scenario=serve_body(model="llama-3.1-405b", gpus=8),
            controls=["dtype"],
            explore=dict(variants=[{"dtype": "bf16"}, {"dtype": "fp8"}], labels=["bf16", "fp8"]),
            headlines=["weights", "total"],
        ),
        dict(
            part=3,
            title="The KV cache grows with every token",
            text=[
                "Weights are a fixed cost. The KV cache grows: for every token of every live conversation, each layer keeps a key and a value vector per KV head.",
                "Per token: 2 × layers × KV heads × head dim × bytes, for the 8B model 2 × 32 × 8 × 128 × 2. Times the context, times the concurrent sequences.",
            ],
            question="Predict: how many bytes per token, and how large is the cache at 32k tokens? Then drag the context from 4k to 32k.",
            reveal=[
                f"{count(s1.kv_bytes_per_token)} bytes per token: {gb(kv(s1))} at 4,096 tokens, {gb(kv(s5))} at 32,768. Eight times the context, eight times the cache.",
                "The weights did not move: the KV cache is the part that grows with users and context.",
            ],
            scenario=serve_body(gpus=1),
            controls=["context"],
            explore=dict(variants=[{"context": 4096}, {"context": 32768}], labels=["4k", "32k"]),
            headlines=["kv"],
        ),
        dict(
            part=3,
            title="Break it: the same model without GQA",
            kind="break",
            text=[
                "Llama 3.1 70B has 64 attention heads but 8 KV heads: each group of eight query heads shares one key/value head (grouped-query attention).",
                "Here the model has 64 KV heads, one per attention head, as older models did: sixteen users at 8k on four GPUs.",
            ],
            question="Predict: by what factor does GQA shrink the KV cache? Then set KV heads back to 8.",
            reveal=[
                f"KV cache per GPU: {gb(kv(s6x))} with 64 KV heads, {gb(kv(s6))} with 8: eight times smaller. The K and V projection weights shrink too: {gb(item(s6x, 'weights'))} → {gb(item(s6, 'weights'))} per GPU.",
                "With 64 KV heads sixteen users at 8k do not fit on four GPUs; with 8 they do. The cache scales with KV heads, not attention heads.",
            ],
            scenario=serve_body(
                model="llama-3.1-70b",
                gpus=4,
                context=8192,
                users=16,
                overrides={"num_key_value_heads": 64},
            ),
            controls=["kv_heads"],
            explore=dict(
                variants=[{"overrides": {"num_key_value_heads": 64}}, {"overrides": None}],
                labels=["64 KV heads", "8 KV heads (GQA)"],
            ),
            headlines=["kv", "weights"],
        ),
        dict(
            part=3,
            title="Break it: weights fit, users do not",
            kind="break",
            text=[
                "A plan that holds the weights is not yet a server. Here the 70B model in fp8 serves 8 users of 4,096 tokens on one H100.",
            ],
            question="Predict: how many of the 8 users fit on one GPU, and on two? Then give it 2 GPUs.",
            reveal=[
                f"On one GPU the {gb(item(s7, 'weights'))} of weights fit in {gb0(h100.marketed_bytes)}, but weights, workspace and context already pass the 90 % line: no room for even one user's KV cache.",
                f"On two GPUs each holds {gb(item(s7b, 'weights'))} of weights and the rest up to the line is KV cache: room for {count(s7b.max_concurrent_sequences)} conversations, so all 8 fit.",
            ],
            scenario=serve_body(model="llama-3.1-70b", gpus=1, dtype="fp8", users=8),
            controls=["gpus"],
            explore=dict(variants=[{"gpus": 1}, {"gpus": 2}], labels=["1 GPU", "2 GPUs"]),
            headlines=["capacity"],
        ),
        dict(
            part=3,
            title="What four GPUs buy you",
            kind="drill",
            text=[
                f"Split four ways, each GPU keeps {gb(item(s8, 'weights'))} of weights and {gb(category(s8, 'overhead'))} of workspace and context. Everything between that and the 90 % line ({gb(s8.budget_bytes)}) is KV cache.",
                "KV capacity in tokens = (budget − weights − overhead) × GPUs ÷ KV bytes per token. Divide by the context to get the conversations that fit at once.",
            ],
            question=f"The 70B model keeps {count(s8.kv_bytes_per_token)} bytes per token. Work it out before you look.",
            scenario=serve_body(model="llama-3.1-70b", gpus=4, context=8192),
            controls=[],
            headlines=["capacity"],
            taught=[count(s8.kv_capacity_tokens)],
            drill=dict(
                question="Concurrent 8,192-token conversations on 4 × H100:",
                answer_from="max_concurrent_sequences",
                unit="sequences",
                tolerance=0.02,
                arithmetic=[
                    "({budget_bytes:gb} budget − {per_gpu.items[key=weights].bytes:gb} weights − {per_gpu.items[category=overhead].bytes:gb} overhead) per GPU × {gpus} GPUs ÷ {kv_bytes_per_token:int} bytes per token = {kv_capacity_tokens:int} tokens",
                    "{kv_capacity_tokens:int} tokens ÷ {context:int} per conversation = {max_concurrent_sequences:int} conversations",
                ],
            ),
        ),
        dict(
            part=3,
            title="Drill: the 8B model's KV cache",
            kind="drill",
            text=[
                "Llama 3.1 8B has 32 layers and 8 KV heads of dimension 128, and keeps its cache in bf16 (2 bytes).",
                "Work out the cache of one 131,072-token (128k) conversation before you look.",
            ],
            question="Compute it on paper first.",
            scenario=serve_body(gpus=1, context=131072),
            controls=[],
            headlines=["kv"],
            taught=[f"{S(gpus=1, context=131072).to_dict()['kv_bytes_per_sequence'] / 1e9:.2f}"],
            drill=dict(
                question="KV cache of one 128k-token sequence:",
                answer_from="kv_bytes_per_sequence",
                unit="GB",
                tolerance=0.01,
                arithmetic=[
                    "{per_gpu.items[key=kv_cache].explain}",
                    "that is {kv_bytes_per_token:int} bytes per token, more than the {per_gpu.items[key=weights].bytes:gb} of weights at 128k",
                ],
            ),
        ),
        dict(
            part=4,
            title="Training needs 16 bytes per parameter",
            text=[
                "The data team wants to fine-tune the 8B model. Training with Adam in mixed precision keeps, per parameter: 2 bytes of bf16 weights, 2 of gradients and 12 of optimizer state (an fp32 master copy and two moments).",
            ],
            question=f"Predict: how many GB of model states for {billions(t10.params_total)} parameters, and does one 80 GB GPU hold them? Then show the plan.",
            reveal=[
                f"That is 16 bytes per parameter: {billions(t10.params_total)} × 16 = {gb(t10.model_states_bytes)} of model states, eight times the {gb(2 * t10.params_total)} of bf16 weights a server holds, before one activation is saved.",
                f"One H100 cannot hold them: with {gb(t10.activations_bytes)} of activations and the step's temporaries on top, the plan needs {gb(t10.per_gpu_total_bytes)} at its peak.",
            ],
            scenario=train_body(gpus=1),
            controls=[],
            headlines=["model_states", "total"],
        ),
        dict(
            part=4,
            title="Eight GPUs, plain data parallel",
            text=[
                "Plain data parallelism gives every GPU a full copy of the weights, gradients and optimizer state, and a different slice of the batch.",
            ],
            question="Predict: on 8 GPUs, does the per-GPU bill shrink, and what happens to the speed? Switch between 8 and 1 GPUs.",
            reveal=[
                f"It multiplies speed ({count(t10.tokens_per_second)} → {count(t11.tokens_per_second)} tokens/s), never capacity: each GPU still holds {gb(t11.model_states_bytes)} of states.",
            ],
            scenario=train_body(gpus=8, zero=0),
            controls=["gpus"],
            explore=dict(
                variants=[{"gpus": 1}, {"gpus": 8}], labels=["1 GPU", "8 GPUs"], reference=0
            ),
            headlines=["model_states", "tokens"],
        ),
        dict(
            part=4,
            title="Break it: submit it anyway",
            kind="break",
            text=[
                "An out-of-memory error is arithmetic nobody did. It comes early when the static states do not fit, and late, sometimes hours in, when the longest batch drives the activations to their peak.",
                "Here is the run as someone might submit it: eight GPUs, no sharding, no recompute, 8,192-token sequences, micro-batch 4.",
            ],
            question="Predict: which block crosses the HBM line first? Then halve the micro-batch or the sequence and watch the green block.",
            reveal=[
                f"The static states cross first: {gb(t12.model_states_bytes)} of weights, gradients and optimizer state per GPU is over {gb0(h100.marketed_bytes)} before one activation is saved (the early OOM). On top come {gb(t12.activations_bytes)} of saved activations and {gb(item(t12, 'logits'))} of logits (the late one): they halve with the tokens of a micro-batch, the states do not move.",
                "Among the ways out, a layout may read “tp 2 sp”: sp is sequence parallelism, which with tensor parallelism also splits the norms' and dropout's activations along the sequence.",
            ],
            scenario=train_body(gpus=8, zero=0, seq=8192, micro_batch=4, checkpointing="none"),
            controls=["seq", "micro_batch"],
            headlines=["activations", "total"],
        ),
        dict(
            part=5,
            title="ZeRO: stop keeping eight copies",
            text=[
                "ZeRO shards the training state across the data-parallel GPUs instead of copying it: stage 1 divides the optimizer state by their number, stage 2 the gradients too, stage 3 (FSDP) the weights as well.",
            ],
            question=f"Predict the model states per GPU at each stage on eight GPUs, starting from {gb(z[0].model_states_bytes)} at ZeRO-0. Then step the ZeRO stage from 0 to 3.",
            reveal=[
                f"Model states per GPU on eight GPUs: {' → '.join(gb(p.model_states_bytes) for p in z)}.",
                "Activations belong to each GPU's own micro-batch: no stage divides them.",
            ],
            scenario=train_body(gpus=8, zero=0),
            controls=["zero"],
            explore=dict(
                variants=[{"zero": k} for k in range(4)],
                labels=[f"ZeRO-{k}" for k in range(4)],
            ),
            headlines=["zero_stages"],
        ),
        dict(
            part=5,
            title="The fine-tune runs",
            text=[
                "With ZeRO-3 on eight GPUs each GPU holds an eighth of the states, and the rest of the GPU is free for activations.",
                "The price is communication: ZeRO-3 gathers every layer's weights in the forward and the backward pass.",
            ],
            question="Predict: how much more traffic per step than plain data parallelism? Then switch between ZeRO-3 and ZeRO-0.",
            reveal=[
                f"Each GPU holds {gb(z[3].model_states_bytes)} of the {gb(t10.model_states_bytes)} of states.",
                f"Traffic per step per GPU: {gb(z[3].comm_bytes_per_step)} with ZeRO-3 against {gb(z[0].comm_bytes_per_step)} for plain data parallelism: 1.5 times. Cheap over NVLink, dear over a slow network.",
            ],
            scenario=train_body(gpus=8, zero=3),
            controls=["zero"],
            explore=dict(
                variants=[{"zero": 0}, {"zero": 3}], labels=["ZeRO-0", "ZeRO-3"], reference=0
            ),
            headlines=["traffic", "total"],
        ),
        dict(
            part=5,
            title="Tensor and pipeline parallel split more",
            text=[
                "Tensor and pipeline parallelism cut the model itself: each GPU holds total ÷ (tp × pp) of the parameters, and ZeRO then divides that share's states by the data-parallel degree.",
            ],
            question="Predict: with TP 2 (the eight GPUs become dp 4 × tp 2), what happens to the activations and the model states? Then set TP to 2.",
            reveal=[
                f"Activations {gb(z[1].activations_bytes)} → {gb(t15.activations_bytes)} per GPU: tensor parallelism splits most of them; the norms' inputs stay whole unless sequence parallelism (sp) splits them too.",
                f"Model states {gb(z[1].model_states_bytes)} → {gb(t15.model_states_bytes)}: half the parameters per GPU, but ZeRO-1 now divides the optimizer by 4, not 8. Pipeline stages each keep their own layers' activations.",
            ],
            scenario=train_body(gpus=8, zero=1),
            controls=["tp"],  # the TP / PP / DP row
            explore=dict(variants=[{"tp": 1}, {"tp": 2}], labels=["tp 1", "tp 2"], reference=0),
            headlines=["activations", "model_states"],
        ),
        dict(
            part=5,
            title="Longer sequences",
            text=[
                "The model states depend on the parameters; the activations on the tokens of each micro-batch: sequence length × micro-batch size.",
            ],
            question="Predict: double the sequence from 4,096 to 8,192 tokens. Which block doubles, which stay put, and does the plan still fit? Then do it.",
            reveal=[
                f"The activations double, {gb(t16a.activations_bytes)} → {gb(t16.activations_bytes)}; the model states stay put. {'The plan still fits' if t16.fits else 'At 8,192 tokens this plan no longer fits'}.",
                "Activation memory is linear in the tokens per micro-batch: it is the part of the bill that changes from run to run.",
            ],
            scenario=train_body(gpus=8, zero=3, seq=4096, checkpointing="none"),
            controls=["seq"],
            explore=dict(
                variants=[{"seq": 4096}, {"seq": 8192}], labels=["4,096", "8,192"], reference=0
            ),
            headlines=["activations"],
        ),
        dict(
            part=5,
            title="Activation checkpointing buys memory",
            text=[
                "Activation checkpointing keeps only each layer's input and recomputes the rest during the backward pass. Here: 16,384-token sequences, no recompute.",
            ],
            question="Predict: how much activation memory does full recompute free, and what does it cost in speed? Then turn it on.",
            reveal=[
                f"It takes the activations from {gb(t17.activations_bytes)} to {gb(t17b.activations_bytes)} per GPU, for a third more compute: {'−' if tps < 0 else '+'}{abs(tps) * 100:.0f} % tokens per second.",
                timeline_sentence(t17, t17b),
            ],
            scenario=train_body(gpus=8, zero=3, seq=16384, checkpointing="none"),
            controls=["checkpointing"],
            explore=dict(
                variants=[{"checkpointing": "none"}, {"checkpointing": "full"}],
                labels=["no recompute", "full recompute"],
                reference=0,
            ),
            headlines=["activations", "tokens"],
        ),
        dict(
            part=6,
            title="Fine-tuning 70B: which server?",
            text=[
                f"A full fine-tune of the 70B model ({billions(n70)} parameters, 16 bytes each) with ZeRO-3; activation checkpointing is left to the planner.",
                f"The fewest GPUs = model states ÷ what one GPU may use (90 % of {gb0(h100.marketed_bytes)} = {gb0(budget)}), rounded up; activations and whole servers can raise it.",
            ],
            question="Predict the fewest H100s. Then switch the GPU type to H200 and to B200.",
            reveal=[
                f"The lower bound: the model states alone need at least {bound} H100s at {gb0(budget)} each (step 21's drill works out their size).",
                f"The planner needs {t18['h100-sxm'].gpus}: at 16 GPUs the activations come on top ({at16.reason}), and beyond one server it adds whole servers of 8. It needs {t18['h200'].gpus} H200s, {t18['b200'].gpus} B200s: only the memory per GPU changes the count.",
            ],
            scenario=train_body(model="llama-3.1-70b", gpus="auto", zero=3),
            controls=["gpu"],
            explore=dict(
                variants=[{"gpu": "h100-sxm"}, {"gpu": "h200"}, {"gpu": "b200"}],
                labels=["H100", "H200", "B200"],
            ),
            headlines=["gpu_count"],
        ),
        dict(
            part=6,
            title="How many H100s, honestly",
            text=[
                "A plan that uses 99.5 % of HBM is an OOM waiting for a long prompt. Plan to at most about 90 % and round the GPU count up until the bill fits under that line.",
                "Four conversations of 8k on the 70B model in bf16.",
            ],
            question="Predict: how many H100s at the 90 % line, and at 100 %? Then move the headroom to 100 %.",
            reveal=[
                f"At 90 %: {s19.gpus} GPUs, {gb(s19.per_gpu_total_bytes)} each; {at2.gpus} would need {at2.reason.split(': ', 1)[-1]}.",
                f"At 100 %: {s19x.gpus} GPUs, {gb(s19x.per_gpu_total_bytes)} of {gb0(h100.marketed_bytes)} each, {s19x.per_gpu_total_bytes / h100.marketed_bytes * 100:.0f} % of HBM: half the GPUs, and no slack for a longer prompt or a fifth user. That is the OOM that has not happened yet.",
            ],
            scenario=serve_body(model="llama-3.1-70b", gpus="auto", context=8192, users=4),
            controls=["headroom"],
            givens=["99.5"],  # a rule of thumb, not a figure of the plan
            explore=dict(variants=[{"headroom": 0.9}, {"headroom": 1.0}], labels=["90 %", "100 %"]),
            headlines=["gpu_count", "total"],
        ),
        dict(
            part=6,
            title="Serving 405B: three answers",
            kind="break",
            text=[
                "The 405B model in bf16 on one DGX H100, at 8k tokens. There are three ways out of an OOM: fewer bytes per parameter, more memory per GPU, or more GPUs.",
            ],
            question="Predict which way out costs least. Then try one: the weight precision, the GPU type or the GPU count.",
            reveal=[
                f"In bf16 it needs {gb(s20.per_gpu_total_bytes)} per GPU. Fewer bytes per parameter (fp8: {gb(s20f.per_gpu_total_bytes)}, a quantisation), more memory per GPU (8 × H200: {gb(s20h.per_gpu_total_bytes)} of {gb0(h200.marketed_bytes)}, a different server), or more GPUs (two servers with pipeline stages: network and cost).",
                "fp8 keeps this server, at some cost in quality; H200s are a different server; 16 GPUs are a second server and the network between the two. The engine checks each and lists it under “Ways out”: apply one.",
            ],
            scenario=serve_body(model="llama-3.1-405b", gpus=8, context=8192),
            controls=["dtype", "gpu", "gpus"],
            check_with=[{"dtype": "fp8"}, {"gpu": "h200"}],
            headlines=["total"],
        ),
        dict(
            part=6,
            title="Drill: 70B training state",
            kind="drill",
            text=[
                "Full fine-tuning with Adam in mixed precision costs 16 bytes per parameter of model states, whatever the sharding.",
                f"Llama 3.1 70B has {billions(n70)} parameters.",
            ],
            question="Compute its weights, gradients and optimizer state before you look.",
            scenario=train_body(model="llama-3.1-70b", gpus=1, zero=0),
            controls=[],
            headlines=["model_states"],
            taught=[
                f"{t21.model_states_bytes / 1e12:.2f} TB",
                f"{t21.model_states_bytes / 1e9:,.2f}",
            ],
            drill=dict(
                question="Weights + gradients + optimizer state of the 70B model:",
                answer_from="model_states_bytes",
                unit="TB",
                tolerance=0.01,
                arithmetic=[
                    "weights {per_gpu.items[key=weights].explain}",
                    "gradients {per_gpu.items[key=gradients].explain}",
                    "optimizer {per_gpu.items[key=master].explain} (fp32 master) + {per_gpu.items[key=optimizer].explain} (two moments)",
                    "in all 16 bytes × {params_total:int} parameters = {answer:tb}: why full fine-tunes of large models start at dozens of GPUs, and why LoRA exists",
                ],
            ),
        ),
        dict(
            part=7,
            title="Cheat sheet",
            kind="recap",
            text=[
                "Every formula of the lesson on one page: open the Cheat sheet tab. Each is what the engine computes, itemised the same way as the blocks in the picture.",
            ],
            question="Which line of the bill grows with users, and which with sequence length?",
            scenario=serve_body(),
            controls=[],
            headlines=["total"],
            link="#/cheatsheet",
        ),
        dict(
            part=7,
            title="Playground",
            kind="recap",
            text=[
                "The playground is the simulation with every control free. The address bar holds the full state, so a link reproduces exactly what you see.",
            ],
            question="Size your own model: type a catalog name or a Hugging Face id, or paste its config.json; choose a GPU, and share the link with your team.",
            scenario=serve_body(),
            controls=[],
            headlines=["total"],
            link="#/playground",
        ),
    ]


# A figure a step teaches: a decimal (16.06) or a count with thousands separators (61,486).
FIGURE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+")
SERVE_REQUEST = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpu_memory": None,
    "server_gpus": 8,
    "headroom": 0.9,
    "units": "GB",
    "gpus": None,
    "tp": None,
    "pp": None,
    "dtype": None,
    "kv_dtype": None,
    "context": 4096,
    "users": 1,
}
TRAIN_REQUEST = {
    **{k: v for k, v in SERVE_REQUEST.items() if k not in ("kv_dtype", "context", "users")},
    "dp": None,
    "zero": None,  # the planner's choice
    "micro_batch": 1,
    "seq": 4096,
    "checkpointing": None,  # the planner's choice
    "method": "full",
    "lora_rank": None,
}


def page_request(scenario: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The route and body the page posts for a step's scenario (state.js `toRequest` over the
    page's defaults, `fixes: false`): the browser test checks the page sends exactly this."""
    mode = scenario["mode"]
    body = dict(TRAIN_REQUEST if mode == "train" else SERVE_REQUEST)
    for key, value in scenario.items():
        if key == "overrides":
            if value:
                body["overrides"] = value
        elif key in body:
            body[key] = value
    return f"/api/{mode}", {**body, "fixes": False}


def taught(step: dict[str, Any]) -> list[str]:
    """The figures a step teaches: those of its reveal that its text, question and aside do not
    already state (before the reveal none of them is on the page), plus a drill's answer."""
    said = " ".join([*step["text"], step.get("question", ""), step.get("aside", "")])
    # the inputs the learner sets (a context of 4,096, a sequence of 8,192) are not taught
    inputs = [step["scenario"], *step.get("explore", {}).get("variants", [])]
    given = {f"{v:,}" for i in inputs for v in i.values() if isinstance(v, int)}
    out = [
        f
        for p in step.get("reveal", [])
        for f in FIGURE.findall(p)
        if f not in said and f not in given
    ]
    return list(dict.fromkeys([*out, *step.get("taught", [])]))


def build() -> dict[str, Any]:
    out = []
    for n, step in enumerate(steps(), 1):
        step = {k: v for k, v in step.items() if k not in ("check_with", "givens")}
        step = {"id": n, "part_title": PARTS[step["part"]], "kind": "explain", **step}
        step["taught"] = taught(step)
        out.append(step)
    assert len(out) == 23, len(out)
    return {"title": "GPU memory math", "parts": PARTS, "steps": out}


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def _figures(data: Any, into: set[str]) -> set[str]:
    """Every figure an answer can put on the page, in the page's formats."""
    if isinstance(data, dict):
        for v in data.values():
            _figures(v, into)
    elif isinstance(data, list):
        for v in data:
            _figures(v, into)
    elif isinstance(data, str):
        into.update(FIGURE.findall(data))
    if isinstance(data, dict) and isinstance(data.get("per_gpu"), dict):
        sums: dict[str, int] = {}
        for i in data["per_gpu"].get("items", []):
            sums[i["category"]] = sums.get(i["category"], 0) + i["bytes"]
        _figures(list(sums.values()), into)
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        x = float(data)
        into.update(
            {
                f"{x / 1e9:,.2f}",
                f"{x / 1e9:,.1f}",
                f"{x / 1e12:,.2f}",
                f"{x:,.0f}",
                f"{x:,.2f}",
                f"{x:,.1f}",
                f"{x / 2**20:,.0f}",
            }
        )
    return into


def check_numbers(client: Any | None = None) -> list[str]:
    """Every figure in a step's words against what the page is shown for that step: the answers
    to the very requests the page sends (its scenario, with the ways out, and each variant the
    step visits). A figure no answer holds is a mismatch: the text says what the page does not."""
    if client is None:
        from fastapi.testclient import TestClient

        from gpuplan.web.app import create_app

        client = TestClient(create_app(), raise_server_exceptions=False)
    bad = []
    for n, step in enumerate(steps(), 1):
        path, body = page_request(step["scenario"])
        variants = [*step.get("explore", {}).get("variants", []), *step.get("check_with", [])]
        seen: set[str] = set(step.get("givens", []))
        explore = step.get("explore")
        if explore:  # the headline's comparison: ratios and each variant's figures
            r = client.post(
                "/api/lesson/compare",
                json={
                    "base": step["scenario"],
                    "variants": explore["variants"],
                    "reference": explore.get("reference", 0),
                },
            )
            _figures(r.json(), seen)
        for change in [{"fixes": True}, *variants]:
            request = {**body, **change}
            if request.get("overrides", 1) is None:
                request.pop("overrides")
            r = client.post(path, json=request)
            if r.status_code != 200:
                bad.append(f"step {n}: {request} → {r.status_code} {r.text[:120]}")
                continue
            _figures(r.json(), seen)
        words = " ".join([*step["text"], step["question"], *step.get("reveal", [])])
        for figure in FIGURE.findall(words):
            if figure not in seen:
                bad.append(f"step {n}: “{figure}” is in its text but in no answer the page gets")
    return bad


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text("utf-8") != text:
            print(f"{OUT} is stale: run python tools/make_lesson.py", file=sys.stderr)
            return 1
        bad = check_numbers()
        for line in bad:
            print(line, file=sys.stderr)
        if bad:
            return 1
        print(f"{OUT} is current, and every figure in its text is on the page")
        return 0
    OUT.write_text(text, "utf-8")
    print(f"wrote {len(build()['steps'])} steps to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
