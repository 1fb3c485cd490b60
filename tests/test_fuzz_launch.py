"""Property: any engine launch line gives an engine plan or a one-line GpuplanError.

Lines are built from the three engines' entry points, their memory flags (and unknown ones),
with hostile values, broken quoting and stray tokens; then fed to the parser, the API and the
CLI (`gpuplan serve --from LINE`).
"""

from __future__ import annotations

import shlex

from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import NUMBER_TEXT, TEXT, assert_clean_exit, fuzz_settings, run_cli
from gpuplan.api import serve_launch
from gpuplan.errors import GpuplanError

ENTRY = {
    "vllm": ["vllm serve", "python -m vllm.entrypoints.openai.api_server --model"],
    "sglang": ["python -m sglang.launch_server --model-path", "sglang serve --model-path"],
    "trtllm": ["trtllm-serve", "trtllm-serve serve"],
}
FLAGS = {
    "vllm": [
        "--tensor-parallel-size",
        "-tp",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--block-size",
        "--dtype",
        "--kv-cache-dtype",
        "--quantization",
        "--kv-cache-memory-bytes",
        "--num-gpu-blocks-override",
        "--enforce-eager",
    ],
    "sglang": [
        "--tp-size",
        "--pp-size",
        "--dp-size",
        "--mem-fraction-static",
        "--context-length",
        "--max-total-tokens",
        "--chunked-prefill-size",
        "--cuda-graph-max-bs",
        "--page-size",
        "--dtype",
        "--kv-cache-dtype",
        "--quantization",
    ],
    "trtllm": [
        "--tp_size",
        "--pp_size",
        "--kv_cache_free_gpu_memory_fraction",
        "--max_seq_len",
        "--max_num_tokens",
        "--max_batch_size",
        "--tokens_per_block",
    ],
}
MODELS = st.sampled_from(["llama-3.2-1b", "Qwen/Qwen2.5-0.5B", "qwen1.5-moe-a2.7b", "gpt2"])
GOOD = st.sampled_from(["1", "2", "4", "0.9", "0.5", "4096", "8k", "auto", "bf16", "fp8", "16"])


@st.composite
def launch_lines(draw: st.DrawFn) -> str:
    engine = draw(st.sampled_from(sorted(ENTRY)))
    parts = [draw(st.sampled_from(ENTRY[engine]))]
    if draw(st.integers(0, 5)):
        parts.append(shlex.quote(draw(MODELS)))
    else:
        parts.append(draw(TEXT))
    for _ in range(draw(st.integers(0, 4))):
        flag = draw(st.sampled_from([*FLAGS[engine], "--unknown-flag", "--", "-x"]))
        value = draw(GOOD if draw(st.booleans()) else NUMBER_TEXT)
        form = draw(st.integers(0, 3))
        if form == 0:
            parts.append(f"{flag}={shlex.quote(value)}")
        elif form == 1:
            parts.append(flag)
        else:
            parts += [flag, shlex.quote(value) if form == 2 else value]
    if draw(st.integers(0, 9)) == 0:
        parts.insert(
            draw(st.integers(0, len(parts))), draw(st.sampled_from(["'", '"', "\\", "\\\n"]))
        )
    return " ".join(parts)


@fuzz_settings(1000)
@given(line=launch_lines())
def test_any_launch_line_is_planned_or_refused_in_one_line(line: str) -> None:
    try:
        serve_launch(line, "h100")
    except GpuplanError as err:
        assert str(err) and "\n" not in str(err), repr(err)


@fuzz_settings(300)
@given(line=launch_lines())
def test_serve_from_any_launch_line_exits_cleanly(line: str) -> None:
    argv = ["serve", "--from", line]
    assert_clean_exit(argv, *run_cli(argv))
