"""How an engine schedules steps, by engine and version: whether prefill chunks share steps with
decodes, the token budget of a step, the sequence cap, and which steps replay CUDA graphs.

    vLLM V1 (0.8 on)  chunked prefill always on; decodes first, then prefill chunks fill the
                      budget (vllm/v1/core/sched/scheduler.py). Defaults of vllm/engine/
                      arg_utils.py (_set_default_args_v1), for the API server: max_num_batched_tokens
                      8192 and max_num_seqs 1024 on GPUs of ≥ 70 GiB other than the A100, else 2048
                      and 256. Piecewise CUDA graphs cover steps up to 512 tokens
                      (max_capture_size).
    vLLM V0           prefill-first: waiting prompts run whole in a prefill-only step, decodes
                      wait (vllm/core/scheduler.py _schedule_default); graphs on decode batches
                      ≤ 256; max_num_seqs 256.
    SGLang            prefill batches of up to chunked_prefill_size tokens run on their own, ahead
                      of decode (no mixed chunks by default); decode graphs up to
                      cuda_graph_max_bs. Both are sized by GPU memory in sglang/srt/server_args.py
                      (`sglang_sizes`): before 0.5.3 decode graphs stop at 160 sequences (pull
                      requests #2044 / #2268, Nov. 2024) and the chunk is taken as 8192 on GPUs of
                      ≥ 75 GiB, 4096 below; from 0.5.3 (pull request #10372, Sept. 2025, which
                      "relaxes max_cuda_graph_bs") GPUs of < 60 GB capture 32 (tp < 4) or 160,
                      < 160 GB (H100, H200) 256 (tp < 4) or 512 with 8192-token chunks, larger
                      ones (B200, B300, MI300X/MI325X) 512 with 16384-token chunks.
                      Admission reserves new_token_ratio of each request's output (below), or,
                      for requests that ignore EOS with the radix cache off, replays every
                      remaining output against the pool (`exact_kv`, dynamic.py). Before 0.5
                      (`legacy_cpu`) a decode step also waits for the scheduler's per-sequence
                      work: the overlap scheduler of 0.4 ran the forward in a second Python
                      thread sharing the GIL (sglang issue #2573, Dec. 2024: "Due to GIL issues,
                      the overlap mode doesn't actually always bring benefits") and FlashInfer's
                      plan() copied indptr to the host each step (flashinfer PRs #529 / #564;
                      SGLang removed those syncs in #8340 / #9409 and the thread in #11210,
                      2025). Its size is fitted (kernels.toml legacy_seq_us).
    LMDeploy          TurboMind (a C++ batcher): each iteration first decodes the contexts of
                      every newly admitted request (LlamaBatch::contextDecode, in sub-batches of
                      max_context_token_num), then runs the generation step that emits their
                      first tokens with everyone else's next token: prefill-first, whole
                      prompts, no token budget (src/turbomind/models/llama/LlamaBatch.cc of
                      v0.1); its decode kernel, as TensorRT-LLM's before 0.7, reads KV per head.
                      A first token so costs a context step and a generation step: LMDeploy's
                      own A100 table (docs/en/benchmark/a100_fp16.md, v0.1.0a1) gives Llama-2-7B
                      a first-token latency of 11 ms for a 1-token prompt (one generation step,
                      its per-token latency is 9-10 ms) and 22 ms for 128 tokens.
    TensorRT-LLM      before 0.7 its masked multi-head attention decode kernel read the KV cache
                      once per query head (the GQA-sharing XQA kernel came in release 0.7,
                      TensorRT-LLM docs/source/blogs/XQA-kernel.md); static batches.
                      From 0.7: in-flight batching, context chunks and generation in one step, max_num_tokens
                      8192 (trtllm-serve default); the C++ runtime launches without Python, counted
                      as graphed. From 0.21 trtllm-serve runs the PyTorch flow (the only one
                      serving DeepSeek-V3/R1; `--backend pytorch`, the default from 1.0): CUDA
                      graphs replay generation-only steps (cuda_graph_config), steps carrying
                      context chunks run eager.
    static            a batch prefilled in one step, then decoded together (gptSessionBenchmark,
                      `vllm bench latency`).

Request intake (`poll_steps`): SGLang's scheduler takes new requests from its queue at the top of
each event-loop turn, but `--scheduler-recv-interval N` skips that receive until N decode steps
have run since the last one (a prefill step, or an idle loop with nothing running, triggers it at
once: sglang/srt/managers/scheduler_recv_skipper.py weighs DECODE as 1 and other modes as 1000
against the threshold), and `--num-continuous-decode-steps N` runs N decode steps per loop turn
before the next receive (sglang/srt/managers/scheduler.py). Either way a request sent while a
decode batch runs waits up to N decode steps before its prefill can be scheduled; N = 1 (both
flags' default, and every other engine) receives at every step."""

from __future__ import annotations

from gpuplan.engine.frozen import record, replace
from gpuplan.engine.gpu import GpuSpec

GIB = 1 << 30
# SGLang admits a prompt while prompt + new_token_ratio x max_new_tokens of every running and
# waiting request fit the KV pool; the ratio starts at 0.7 and decays by 0.001 a step to its floor
# of 0.1 (sglang/srt/managers/schedule_policy.py PrefillAdder, global_config's
# default_init/min_new_token_ratio): a long loaded run sits at the floor.
SGLANG_NEW_TOKEN_RATIO = 0.1


@record
class Policy:
    """One engine's step rules."""

    engine: str
    mixed: bool  # prefill chunks ride in decode steps
    budget: int  # tokens per step
    max_seqs: int
    graph_tokens: int  # steps of at most this many tokens replay CUDA graphs ...
    graph_prefill: bool  # ... even when they carry prefill tokens
    gqa_decode: bool = True  # the decode attention kernel reads each KV head once per group
    kv_tokens: int = 0  # KV-cache tokens of the replica (0: admission not limited by memory)
    reserve: float = 0.0  # share of a request's output tokens reserved when it is admitted
    poll_steps: int = 1  # decode steps between two receives of new requests (module docstring)
    # admission replays each request's remaining output instead of reserving a share of it
    # (SGLang, requests that ignore EOS, radix cache off: dynamic.py `_kv_room_exact`)
    exact_kv: bool = False
    # a prompt's first token comes from the generation step after its context step, not from
    # the context step itself (TurboMind, module docstring; dynamic.py `decode_span`)
    first_in_generation: bool = False
    # SGLang before 0.5: each decode step carries the scheduler's per-sequence CPU work
    # (SpeedKnobs.legacy_seq_us; module docstring)
    legacy_cpu: bool = False


def _version(text: str | None) -> tuple[int, ...]:
    out: list[int] = []
    for part in (text or "").lstrip("vV").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def sglang_sizes(version: str | None, gpu: GpuSpec, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang defaults to at `version` on `gpu` with
    `tp` ranks (module docstring; sglang/srt/server_args.py, gpu_mem in MiB as torch reports
    it); None: the newest rules."""
    mib = gpu.memory_bytes / (1 << 20)
    if version and _version(version) < (0, 5, 3):
        return (8192 if gpu.memory_bytes >= 75 * GIB else 4096), 160
    if mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def engine_policy(
    engine: str | None,
    version: str | None,
    gpu: GpuSpec,
    cuda_graphs: bool = True,
    max_num_batched_tokens: int | None = None,
    poll_steps: int = 1,
    tp: int = 1,
) -> Policy:
    """The step rules of `engine` at `version` on `gpu` with `tp` tensor-parallel ranks (module
    docstring); None: vLLM V1."""
    name = (engine or "vllm").lower()
    big = gpu.memory_bytes >= 70 * GIB and not gpu.id.startswith("a100")
    if name.startswith("sglang"):
        budget, graph_bs = sglang_sizes(version, gpu, tp)
        legacy = bool(version) and _version(version) < (0, 5)
        p = Policy(
            "sglang",
            False,
            budget,
            4096,
            graph_bs,
            False,
            reserve=SGLANG_NEW_TOKEN_RATIO,
            legacy_cpu=legacy,
        )
    elif name.startswith(("lmdeploy", "turbomind")):
        p = Policy(
            "turbomind",
            False,
            1 << 30,
            256,
            1 << 30,
            True,
            gqa_decode=False,
            first_in_generation=True,
        )
    elif name.startswith(("trt", "tensorrt", "nim")):
        old = bool(version) and _version(version) < (0, 7)
        torch_flow = bool(version) and _version(version) >= (0, 21) and name.startswith("t")
        p = Policy("trtllm", True, 8192, 2048, 1 << 30, not torch_flow, gqa_decode=not old)
    elif name.startswith("vllm") and version and _version(version) < (0, 8):
        p = Policy("vllm-v0", False, 1 << 30, 256, 256, False)
    else:
        p = Policy("vllm", True, 8192 if big else 2048, 1024 if big else 256, 512, True)
    if max_num_batched_tokens:
        p = replace(p, budget=max_num_batched_tokens)
    if not cuda_graphs:
        p = replace(p, graph_tokens=0, graph_prefill=False)
    if poll_steps > 1:
        p = replace(p, poll_steps=poll_steps)
    return p
