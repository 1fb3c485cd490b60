"""Write src/gpuplan/web/static/lesson.json (the guided lesson as data). Run after editing."""

import json
from pathlib import Path

H100 = {"gpu": "h100-sxm", "gpu_memory": "80GB", "server_gpus": 8}


def serve(**kw):
    return {"mode": "serve", **H100, "model": "llama-3.1-8b", "context": 4096, "users": 1, **kw}


def train(**kw):
    base = {"mode": "train", **H100, "model": "llama-3.1-8b", "micro_batch": 1, "seq": 4096}
    return {**base, **kw}


PARTS = {
    1: "Will it fit?",
    2: "Bytes per parameter",
    3: "The KV cache",
    4: "Training: 16 bytes per parameter",
    5: "Dividing the bill",
    6: "Sizing a real request",
    7: "Recap & playground",
}

STEPS = [
    dict(
        part=1,
        title="The question you are always asked",
        text=[
            "Your server is one DGX H100: eight H100s, 80 GB of HBM each. Two teams want to know whether their model fits, and on how many GPUs.",
            "Start with the smallest request: Llama 3.1 8B, served in bf16 to one user. Every parameter takes 2 bytes, so 8.03 billion parameters are about 16 GB of weights before anything else is counted.",
            "On top of the weights sit a workspace for the forward pass, the CUDA context, and the KV cache of the one conversation. The picture stacks them on the first GPU; hover a block to see its arithmetic.",
        ],
        question="How much of the GPU's 80 GB does this plan use? Read the total, then compare it with the weights alone.",
        scenario=serve(gpus=1),
    ),
    dict(
        part=1,
        title="The 70B model on one GPU",
        kind="break",
        text=[
            "Now the support team's model: Llama 3.1 70B, still in bf16, on a single H100.",
            "Inference touches every weight for every generated token, so all of them must sit in GPU memory at once. Seventy billion parameters at 2 bytes each is about 141 GB, and one GPU has 80.",
        ],
        question="Where does the stack cross the HBM line, and by how much does it overflow? The red marker says.",
        scenario=serve(model="llama-3.1-70b", gpus=1),
    ),
    dict(
        part=2,
        title="Precision is a memory dial",
        text=[
            "Bytes per parameter is the first dial you can turn: fp32 is 4, bf16 is 2, fp8 is 1, and a 4-bit format is about half a byte (plus a little for its scales).",
            "Here the 70B model is in fp8 on one GPU: half the bf16 size, 70.6 GB. Close, but the workspace and CUDA context still have to fit under the 90 % line.",
        ],
        question="Change the weight precision to int4. Does the model now fit on one GPU, and how many users' worth of KV cache is left?",
        scenario=serve(model="llama-3.1-70b", gpus=1, dtype="fp8"),
    ),
    dict(
        part=2,
        title="405B on the whole server",
        kind="break",
        text=[
            "Llama 3.1 405B in bf16 is about 811 GB of weights. Tensor parallelism splits each layer across the GPUs, so each of the eight holds an eighth of the weights.",
            "Splitting divides the bill but does not shrink it: 811 GB over eight GPUs is still about 101 GB each, more than any of them has.",
        ],
        question="Does it fit on all eight GPUs? Try fp8 weights and watch the per-GPU share.",
        scenario=serve(model="llama-3.1-405b", gpus=8),
    ),
    dict(
        part=3,
        title="The KV cache grows with every token",
        text=[
            "Weights are a fixed cost. The KV cache is what grows: for every token in every live conversation, each layer keeps a key and a value vector per KV head.",
            "Per token that is 2 × layers × KV heads × head dimension × bytes per element. Multiply by the context length and by the number of concurrent sequences.",
        ],
        question="Drag the context slider from 4k to 128k tokens. Watch the KV block: at what context is it as large as the weights?",
        scenario=serve(gpus=1),
    ),
    dict(
        part=3,
        title="Break it: the same model without GQA",
        kind="break",
        text=[
            "Llama 3.1 70B has 64 attention heads but only 8 KV heads: groups of eight query heads share one key/value head (grouped-query attention).",
            "This scenario gives the same model 64 KV heads, one per attention head, as older models had. Nothing else changes, yet the KV cache is eight times larger: sixteen users at 8k context no longer fit on four GPUs.",
        ],
        question="Set KV heads back to 8 (clear the override) and compare the KV block. What factor did GQA save?",
        scenario=serve(
            model="llama-3.1-70b",
            gpus=4,
            context=8192,
            users=16,
            overrides={"num_key_value_heads": 64},
        ),
    ),
    dict(
        part=3,
        title="Break it: weights fit, users do not",
        kind="break",
        text=[
            "A plan that fits the weights is not yet a server. Here the 70B model in fp8 squeezes onto one GPU: 70.6 GB of weights in 80 GB of HBM.",
            "But weights plus workspace and context already pass the 90 % line, so there is no room left for the KV cache of even one user.",
        ],
        question="How many concurrent users can this plan serve? Then ask for two GPUs and see what the extra one buys.",
        scenario=serve(model="llama-3.1-70b", gpus=1, dtype="fp8", users=8),
    ),
    dict(
        part=3,
        title="What four GPUs buy you",
        text=[
            "With the weights split four ways, each GPU keeps about 35 GB of weights and 2.5 GB of overhead. Everything between that and the 90 % line is KV cache.",
            "KV capacity in tokens = (budget − weights − overhead) × GPUs ÷ KV bytes per token. Divide by the context length to get the number of conversations that fit at once.",
        ],
        question="How many concurrent 8k-token conversations does the 70B model support on four GPUs? Read KV capacity under the picture.",
        scenario=serve(model="llama-3.1-70b", gpus=4, context=8192, users=1),
        drill=dict(
            question="Concurrent 8,192-token sequences on 4 × H100 (a whole number):",
            answer_from="max_concurrent_sequences",
            scale=1,
            unit="sequences",
            tolerance=0.02,
            explanation="(72 GB budget − 35.28 GB weights − 2.5 GB overhead) per GPU × 4 GPUs ÷ 0.33 MB per token ≈ 418 k tokens; ÷ 8,192 ≈ 50 conversations.",
        ),
    ),
    dict(
        part=3,
        title="Drill: the 8B model's KV cache",
        kind="drill",
        text=[
            "Llama 3.1 8B has 32 layers, 8 KV heads of dimension 128, and keeps its cache in bf16.",
            "Work out the cache for one sequence of 131,072 tokens (128k) before you look at the picture.",
        ],
        question="Compute it on paper first, then enter your answer.",
        scenario=serve(gpus=1, context=131072),
        drill=dict(
            question="KV cache of one 128k-token sequence, in GB:",
            answer_from="kv_bytes_per_sequence",
            scale=1e-9,
            unit="GB",
            tolerance=0.05,
            explanation="2 × 32 layers × 8 KV heads × 128 × 2 bytes = 131,072 bytes (0.13 MB) per token; × 131,072 tokens ≈ 17.2 GB, more than the model's 16 GB of weights.",
        ),
    ),
    dict(
        part=4,
        title="Training needs 16 bytes per parameter",
        text=[
            "The data team wants to fine-tune the 8B model. Training with Adam in mixed precision keeps, per parameter: 2 bytes of bf16 weights, 2 bytes of gradients, and 12 bytes of optimizer state (an fp32 master copy plus two moments).",
            "That is 16 bytes per parameter, eight times the bf16 serving bill, before a single activation is stored.",
        ],
        question="How large are the static training states of the 8B model, and do they fit on one GPU?",
        scenario=train(gpus=1),
    ),
    dict(
        part=4,
        title="Eight GPUs, plain data parallel",
        text=[
            "Plain data parallelism gives every GPU a full copy of the model, gradients and optimizer, and a different slice of the batch.",
            "It makes training faster, but each GPU's bill is the same as before: eight copies of a bill that did not fit is eight OOMs.",
        ],
        question="Set the data-parallel degree to 8 with ZeRO off. Did the per-GPU bill shrink?",
        scenario=train(gpus=8, dp=8, zero=0),
    ),
    dict(
        part=4,
        title="Break it: submit it anyway",
        kind="break",
        text=[
            "An out-of-memory error is arithmetic nobody did. It comes early when the static states do not fit, and late, sometimes hours in, when the longest batch drives activations to their peak.",
            "Here is the run as someone might submit it: eight GPUs, no sharding, long sequences and a larger micro-batch.",
        ],
        question="Which block crosses the HBM line first, and by how much?",
        scenario=train(gpus=8, dp=8, zero=0, seq=8192, micro_batch=4),
    ),
    dict(
        part=5,
        title="ZeRO: stop keeping eight copies",
        text=[
            "ZeRO shards the training state across the data-parallel GPUs instead of copying it. Stage 1 divides the optimizer state by the number of GPUs, stage 2 the gradients too, stage 3 (or FSDP) the weights as well.",
            "Activations belong to each GPU's own micro-batch, so no ZeRO stage divides them.",
        ],
        question="Step the ZeRO stage from 0 to 3 and watch which blocks shrink.",
        scenario=train(gpus=8, dp=8, zero=1),
    ),
    dict(
        part=5,
        title="The fine-tune runs",
        text=[
            "With ZeRO-3 across eight GPUs, each holds an eighth of the 128 GB of states, about 16 GB, and the rest of the GPU is free for activations.",
            "The price is communication: ZeRO-3 gathers the weights for every layer, about 1.5 times the traffic of plain data parallelism. Over NVLink that is cheap; over a slow network it is not.",
        ],
        question="How much memory per GPU is left for activations with ZeRO-3 on eight GPUs?",
        scenario=train(gpus=8, dp=8, zero=3),
    ),
    dict(
        part=5,
        title="Tensor and pipeline parallel split more",
        text=[
            "Tensor and pipeline parallelism cut the model itself: each GPU holds total ÷ (tp × pp) of the parameters, and ZeRO then divides that share's states by the data-parallel degree.",
            "Only tensor (and sequence) parallelism also divides the activations; pipeline stages each hold the activations of their own layers.",
        ],
        question="Try tp = 2 with dp = 4. What happened to the activations compared with dp = 8?",
        scenario=train(gpus=8, tp=2, dp=4, zero=1),
    ),
    dict(
        part=5,
        title="Longer sequences",
        text=[
            "Activation memory is linear in the tokens of a micro-batch: sequence length × micro-batch size. Double either and the activations double.",
            "It is the part of the training bill that changes from one run to the next, which is why a run that fitted yesterday can fail today.",
        ],
        question="Double the sequence length from 4k to 8k. Which block doubles, and which stay put?",
        scenario=train(gpus=8, dp=8, zero=3, seq=4096),
    ),
    dict(
        part=5,
        title="Activation checkpointing buys memory",
        text=[
            "Activation checkpointing keeps only each layer's input and recomputes the rest during the backward pass.",
            "It costs about a third more compute (roughly 25 % fewer tokens per second) and gives back almost all of the activation memory.",
        ],
        question="Turn checkpointing on. How much activation memory did it free?",
        scenario=train(gpus=8, dp=8, zero=3, seq=16384, checkpointing=False),
    ),
    dict(
        part=6,
        title="Fine-tuning 70B: which server?",
        text=[
            "A full fine-tune of the 70B model needs about 1.1 TB of static state. Divide by what one GPU can really use and round up: that is the fewest GPUs, whoever makes them.",
            "The per-GPU bill does not care about the vendor; only the memory per GPU changes the count.",
        ],
        question="Let the planner pick the GPU count on H100s, then switch to H200 or B200. How does the count change?",
        scenario=train(model="llama-3.1-70b", gpus="auto", zero=3),
    ),
    dict(
        part=6,
        title="How many H100s, honestly",
        text=[
            "A plan that uses 99.5 % of HBM is an OOM waiting for a long prompt. Plan to at most about 90 % and round up the GPU count until the bill fits under that line.",
            "The trail under the picture shows every smaller count the planner tried and why it was not enough.",
        ],
        question="Why is the answer four GPUs and not two? Move the headroom to 1.0 and see whether the answer changes.",
        scenario=serve(model="llama-3.1-70b", gpus="auto", context=8192, users=32),
    ),
    dict(
        part=6,
        title="Serving 405B: three answers",
        kind="break",
        text=[
            "The 405B model in bf16 does not fit on one DGX H100. There are three ways out, and each costs something different.",
            "Lower the bytes per parameter (fp8: a quantisation), raise the memory per GPU (H200 or B200: a different server), or add GPUs (two servers and pipeline parallelism: network and cost).",
        ],
        question="Try each: fp8 weights, GPU type H200, and 16 GPUs. The fixes listed under the picture come from the engine.",
        scenario=serve(model="llama-3.1-405b", gpus=8, context=8192),
    ),
    dict(
        part=6,
        title="Drill: 70B training state",
        kind="drill",
        text=[
            "Full fine-tuning with Adam in mixed precision costs 16 bytes per parameter of static state, whatever the sharding.",
            "Llama 3.1 70B has 70.55 billion parameters.",
        ],
        question="Compute it before you look.",
        scenario=train(model="llama-3.1-70b", gpus=1, zero=0),
        drill=dict(
            question="Weights + gradients + optimizer state of the 70B model on one GPU, in TB:",
            answer_from=[
                "per_gpu.items[category=weights].bytes",
                "per_gpu.items[category=gradients].bytes",
                "per_gpu.items[category=optimizer].bytes",
            ],
            scale=1e-12,
            unit="TB",
            tolerance=0.05,
            explanation="70.55 B parameters × 16 bytes ≈ 1.13 TB: why full fine-tunes of large models start at dozens of GPUs, and why LoRA exists.",
        ),
    ),
    dict(
        part=7,
        title="Cheat sheet",
        kind="recap",
        text=[
            "Every formula of the lesson on one page: open the Cheat sheet tab. Each one is what the engine computes, itemised the same way as the blocks in the picture.",
        ],
        question="Which line of the bill grows with users, and which with sequence length?",
        scenario=serve(),
        link="#/cheatsheet",
    ),
    dict(
        part=7,
        title="Playground",
        kind="recap",
        text=[
            "The playground is the simulation with every control free. The address bar always holds the full state, so a link reproduces exactly what you see.",
        ],
        question="Size your own model: paste its config.json, choose a GPU, and share the link with your team.",
        scenario=serve(),
        link="#/playground",
    ),
]

out = []
for n, step in enumerate(STEPS, 1):
    step = {"id": n, "part_title": PARTS[step["part"]], "kind": "explain", **step}
    out.append(step)
assert len(out) == 23, len(out)
path = Path(__file__).resolve().parent.parent / "src/gpuplan/web/static/lesson.json"
path.write_text(
    json.dumps({"title": "GPU memory math", "parts": PARTS, "steps": out}, indent=1) + "\n"
)
print(f"wrote {len(out)} steps to {path}")
