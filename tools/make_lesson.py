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
    s3 = S(model="llama-3.1-70b", gpus=1, dtype="fp8")
    s3b = S(model="llama-3.1-70b", gpus=1, dtype="int4")
    s4 = S(model="llama-3.1-405b", gpus=8)
    s4b = S(model="llama-3.1-405b", gpus=8, dtype="fp8")
    s5 = S(gpus=1, context=131072)
    s6 = S(model="llama-3.1-70b", gpus=4, context=8192, users=16)
    s6x = S(
        model="llama-3.1-70b",
        gpus=4,
        context=8192,
        users=16,
        overrides={"num_key_value_heads": 64},
    )
    s7 = S(model="llama-3.1-70b", gpus=1, dtype="fp8", users=8)
    s8 = S(model="llama-3.1-70b", gpus=4, context=8192)
    t10 = T(gpus=1)
    t11 = T(gpus=8, zero=0)
    t12 = T(gpus=8, zero=0, seq=8192, micro_batch=4)
    z = [T(gpus=8, zero=k) for k in range(4)]
    t15 = T(gpus=8, tp=2, zero=1)
    t16 = T(gpus=8, zero=3, seq=8192)
    t17 = T(gpus=8, zero=3, seq=16384)
    t17b = T(gpus=8, zero=3, seq=16384, checkpointing="full")
    t18 = {
        g: T(model="llama-3.1-70b", gpu=g, gpus="auto", zero=3)
        for g in ("h100-sxm", "h200", "b200")
    }
    s19 = S(model="llama-3.1-70b", gpus="auto", context=8192, users=32)
    s20 = S(model="llama-3.1-405b", gpus=8, context=8192)
    s20h = S(model="llama-3.1-405b", gpus=8, context=8192, gpu="h200")
    t21 = T(model="llama-3.1-70b", gpus=1, zero=0)
    budget = int(0.9 * h100.marketed_bytes)
    n70 = t21.params_total
    bound = math.ceil(t21.model_states_bytes / budget)
    at16 = next(a for a in t18["h100-sxm"].search if a.gpus == 16)
    tps = t17b.tokens_per_second / t17.tokens_per_second - 1

    return [
        dict(
            part=1,
            title="The question you are always asked",
            text=[
                f"You run one DGX H100: eight H100s with {gb0(h100.marketed_bytes)} of memory each. Two teams ask the same thing: will our model fit, and on how many GPUs?",
                f"Start small: Llama 3.1 8B served in bf16. {billions(s1.params_total)} parameters × 2 bytes = {gb(item(s1, 'weights'))} of weights. On top sit a {gb(item(s1, 'workspace'))} workspace, {gb(item(s1, 'cuda_context'))} of CUDA context and {gb(item(s1, 'kv_cache'))} of KV cache for one 4,096-token conversation: {gb(s1.per_gpu_total_bytes)} of {gb0(h100.marketed_bytes)}.",
            ],
            aside=f"About “80 GB”: NVIDIA sells the H100 as {gb0(h100.marketed_bytes)}; the driver reports {count(driver / 2**20)} MiB = {gb(driver)}. This lesson counts every GPU at its round marketed figure (H200 {gb0(h200.marketed_bytes)}, B200 {gb0(b200.marketed_bytes)}); the playground starts from the driver's figure, what a process can really allocate. Change it under Memory per GPU.",
            question="GPU 0 holds the plan; the seven others run copies of it for more users. Hover a block for its arithmetic.",
            scenario=serve_body(gpus=1),
            controls=[],
            headlines=["weights", "total"],
        ),
        dict(
            part=1,
            title="The 70B model on one GPU",
            kind="break",
            text=[
                "Now the support team's model: Llama 3.1 70B in bf16 on one H100.",
                f"Inference reads every weight for every token, so all of them must be resident. {billions(s2.params_total)} × 2 bytes = {gb(item(s2, 'weights'))}, and one GPU has {gb0(h100.marketed_bytes)}.",
            ],
            question="By how much does it overflow? Then give it 2 GPUs: each holds half the weights.",
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
                f"In fp8 the 70B model is {gb(item(s3, 'weights'))} of weights on one GPU: half the bf16 size, yet with the workspace and context it passes the 90 % line ({gb(int(0.9 * h100.marketed_bytes))}).",
            ],
            question=f"Switch the weights to int4. Does it fit now, and how many 4,096-token users does the freed memory hold? (The engine says {gb(item(s3b, 'weights'))} of weights.)",
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
                f"Llama 3.1 405B in bf16 is {gb0(s4.weights_bytes)} of weights. Tensor parallelism splits every layer across the eight GPUs, so each holds an eighth.",
                f"Splitting divides the bill but never shrinks it: {gb0(s4.weights_bytes)} ÷ 8 = {gb(item(s4, 'weights'))} per GPU, more than an H100 has.",
            ],
            question=f"Switch the weights to fp8: {gb(item(s4b, 'weights'))} per GPU. Does the server hold it now?",
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
                f"Per token: 2 × layers × KV heads × head dim × bytes = 2 × 32 × 8 × 128 × 2 = {count(s1.kv_bytes_per_token)} bytes for the 8B model. Times the context, times the concurrent sequences.",
            ],
            question=f"Drag the context from 4k to 128k tokens. At 131,072 tokens the cache is {gb(item(s5, 'kv_cache'))}: larger than the weights.",
            scenario=serve_body(gpus=1),
            controls=["context"],
            explore=dict(variants=[{"context": 4096}, {"context": 131072}], labels=["4k", "128k"]),
            headlines=["kv"],
        ),
        dict(
            part=3,
            title="Break it: the same model without GQA",
            kind="break",
            text=[
                "Llama 3.1 70B has 64 attention heads but 8 KV heads: each group of eight query heads shares one key/value head (grouped-query attention).",
                f"Here the model has 64 KV heads, one per attention head, as older models did. The KV cache grows eight-fold, and so do the K and V projection weights: {gb(item(s6, 'weights'))} → {gb(item(s6x, 'weights'))} per GPU. Sixteen users at 8k no longer fit on four GPUs.",
            ],
            question="Set KV heads back to 8. By what factor did GQA shrink the KV cache?",
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
                f"A plan that holds the weights is not yet a server. The 70B model in fp8 squeezes {gb(item(s7, 'weights'))} of weights into one GPU's {gb0(h100.marketed_bytes)}.",
                "But weights, workspace and context already pass the 90 % line: no room is left for even one user's KV cache.",
            ],
            question="Give it 2 GPUs. How many of the 8 users fit now?",
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
                f"That is 16 bytes per parameter: {billions(t10.params_total)} × 16 = {gb(t10.model_states_bytes)} of model states, eight times the bf16 serving bill, before one activation is saved.",
            ],
            question="Compare the model states with the GPU's 80 GB. The activations come on top.",
            scenario=train_body(gpus=1),
            controls=[],
            headlines=["model_states", "total"],
        ),
        dict(
            part=4,
            title="Eight GPUs, plain data parallel",
            text=[
                "Plain data parallelism gives every GPU a full copy of the weights, gradients and optimizer state, and a different slice of the batch.",
                f"It multiplies speed ({count(t10.tokens_per_second)} → {count(t11.tokens_per_second)} tokens/s), never capacity: each GPU still holds {gb(t11.model_states_bytes)} of states.",
            ],
            question="Switch between 1 and 8 GPUs. Did the per-GPU bill shrink?",
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
                f"Here is the run as someone might submit it: eight GPUs, no sharding, 8,192-token sequences, micro-batch 4: {gb(t12.activations_bytes)} of saved activations and {gb(item(t12, 'logits'))} of logits per GPU.",
            ],
            question="Which block crosses the HBM line first? Halve the micro-batch or the sequence and watch the green block.",
            scenario=train_body(gpus=8, zero=0, seq=8192, micro_batch=4),
            controls=["seq", "micro_batch"],
            headlines=["activations", "total"],
        ),
        dict(
            part=5,
            title="ZeRO: stop keeping eight copies",
            text=[
                "ZeRO shards the training state across the data-parallel GPUs instead of copying it: stage 1 divides the optimizer state by their number, stage 2 the gradients too, stage 3 (FSDP) the weights as well.",
                f"Model states per GPU on eight GPUs: {' → '.join(gb(p.model_states_bytes) for p in z)}. Activations belong to each GPU's own micro-batch: no stage divides them.",
            ],
            question="Step the ZeRO stage from 0 to 3 and watch which blocks shrink.",
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
                f"With ZeRO-3 on eight GPUs each holds an eighth of the {gb(t10.model_states_bytes)} of states, {gb(z[3].model_states_bytes)}, and the rest of the GPU is free for activations.",
                f"The price is communication: ZeRO-3 gathers every layer's weights in the forward and backward passes, {gb(z[3].comm_bytes_per_step)} per step per GPU against {gb(z[0].comm_bytes_per_step)} for plain data parallelism: 1.5 times. Cheap over NVLink, dear over a slow network.",
            ],
            question="Switch between ZeRO-0 and ZeRO-3 and compare the traffic per step.",
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
                f"Tensor parallelism also splits most activations: with tp = 2, {gb(z[1].activations_bytes)} → {gb(t15.activations_bytes)} per GPU; the norms' inputs stay whole unless sequence parallelism splits them too. Pipeline stages each keep their own layers' activations.",
            ],
            question="Set TP to 2 (the eight GPUs become dp 4 × tp 2). What happened to the activations and the model states?",
            scenario=train_body(gpus=8, zero=1),
            controls=["tp"],  # the TP / PP / DP row
            explore=dict(variants=[{"tp": 1}, {"tp": 2}], labels=["tp 1", "tp 2"], reference=0),
            headlines=["activations", "model_states"],
        ),
        dict(
            part=5,
            title="Longer sequences",
            text=[
                "Activation memory is linear in the tokens of a micro-batch: sequence length × micro-batch size. Double either and the activations double.",
                f"It is the part of the bill that changes from run to run: at 8,192 tokens the activations are {gb(t16.activations_bytes)} and this plan no longer fits.",
            ],
            question="Double the sequence length from 4,096 to 8,192. Which block doubles, and which stay put?",
            scenario=train_body(gpus=8, zero=3, seq=4096),
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
                "Activation checkpointing keeps only each layer's input and recomputes the rest during the backward pass.",
                f"At 16,384 tokens it takes the activations from {gb(t17.activations_bytes)} to {gb(t17b.activations_bytes)} per GPU, for a third more compute: {'−' if tps < 0 else '+'}{abs(tps) * 100:.0f} % tokens per second.",
                timeline_sentence(t17, t17b),
            ],
            question="Turn checkpointing on and off. What did it free, and what did it cost?",
            scenario=train_body(gpus=8, zero=3, seq=16384, checkpointing=False),
            controls=["checkpointing"],
            explore=dict(
                variants=[{"checkpointing": False}, {"checkpointing": True}],
                labels=["no recompute", "full recompute"],
                reference=0,
            ),
            headlines=["activations", "tokens"],
        ),
        dict(
            part=6,
            title="Fine-tuning 70B: which server?",
            text=[
                f"A full fine-tune of the 70B model needs {gb(t21.model_states_bytes)} of model states. Divide by what one GPU may use (90 % of {gb0(h100.marketed_bytes)} = {gb0(budget)}) and round up: at least ⌈{t21.model_states_bytes / 1e9:,.1f} ÷ {budget / 1e9:.0f}⌉ = {bound} H100s.",
                f"The planner needs {t18['h100-sxm'].gpus}: at 16 GPUs the activations come on top ({at16.reason}), and beyond one server it adds whole servers of 8. Only the memory per GPU changes the count.",
            ],
            question=f"Switch the GPU type to H200 and to B200. (The engine: {t18['h200'].gpus} H200s, {t18['b200'].gpus} B200s.)",
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
                f"For 32 conversations of 8k on the 70B model the answer is {s19.gpus} GPUs; the picture names why fewer do not do.",
            ],
            question="Why four GPUs and not two? Move the headroom to 100 % and see whether the answer changes.",
            scenario=serve_body(model="llama-3.1-70b", gpus="auto", context=8192, users=32),
            controls=["headroom"],
            explore=dict(variants=[{"headroom": 0.9}, {"headroom": 1.0}], labels=["90 %", "100 %"]),
            headlines=["gpu_count", "total"],
        ),
        dict(
            part=6,
            title="Serving 405B: three answers",
            kind="break",
            text=[
                f"The 405B model in bf16 does not fit one DGX H100: {gb(s20.per_gpu_total_bytes)} per GPU. There are three ways out, each with its own cost.",
                f"Fewer bytes per parameter (fp8: a quantisation), more memory per GPU (8 × H200: {gb(s20h.per_gpu_total_bytes)} of {gb0(h200.marketed_bytes)}, a different server), or more GPUs (two servers with pipeline stages: network and cost).",
            ],
            question="Apply each answer under the picture, or switch the GPU type to H200 or B200 yourself.",
            scenario=serve_body(model="llama-3.1-405b", gpus=8, context=8192),
            controls=["dtype", "gpu", "gpus"],
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
            question="Size your own model: paste its config.json, choose a GPU, and share the link with your team.",
            scenario=serve_body(),
            controls=[],
            headlines=["total"],
            link="#/playground",
        ),
    ]


def build() -> dict[str, Any]:
    out = []
    for n, step in enumerate(steps(), 1):
        step = {"id": n, "part_title": PARTS[step["part"]], "kind": "explain", **step}
        out.append(step)
    assert len(out) == 23, len(out)
    return {"title": "GPU memory math", "parts": PARTS, "steps": out}


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text("utf-8") != text:
            print(f"{OUT} is stale: run python tools/make_lesson.py", file=sys.stderr)
            return 1
        print(f"{OUT} is current")
        return 0
    OUT.write_text(text, "utf-8")
    print(f"wrote {len(build()['steps'])} steps to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
