"""A serving plan as the commands each node of a replica runs.

One node: the engine's launch line as the plan exported it (planner/export.py), listening on
0.0.0.0:8000. Several nodes per replica:
- vLLM runs its multi-node layouts on a Ray cluster: the first node starts the Ray head, waits
  until every node of the replica has joined, then starts `vllm serve … --distributed-executor-
  backend ray`; the other nodes join the head and block (vLLM docs, "Distributed inference and
  serving", the multi-node Ray recipe that LeaderWorkerSet's vLLM example also follows).
- SGLang starts the same launch line on every node with `--nnodes N --node-rank R
  --dist-init-addr HEAD:20000` (python/sglang/srt/server_args.py); rank 0 serves HTTP.
Expert parallelism adds `--enable-expert-parallel` (vLLM) or `--ep-size tp` (SGLang).
"""

from __future__ import annotations

import re
import shlex

from gpuplan.engine.frozen import record
from gpuplan.engine.gpu import GpuSpec
from gpuplan.errors import GpuplanError
from gpuplan.planner.deploy.placement import (
    HTTP_PORT,
    RAY_PORT,
    SGLANG_DIST_PORT,
    Placement,
)

SERVE_ENGINES = ("vllm", "sglang")


@record
class ServeDeploy:
    """What a serving manifest is built from: the plan's launch line and its placement."""

    name: str  # the deployment's name (a DNS label)
    model: str  # what the engine loads: a Hugging Face repo id (or a path inside the image)
    engine: str  # vllm | sglang
    launch: str  # the plan's launch line (planner/export.py launch_command)
    gpu: GpuSpec
    placement: Placement
    expert_parallel: bool = False
    tp: int = 1
    revision: str | None = None
    hf_secret: str | None = "hf-token"  # a Secret with key `token` (HF_TOKEN), optional in the pod

    def __post_init__(self) -> None:
        if self.engine not in SERVE_ENGINES:
            raise GpuplanError(
                f"deployment manifests run {', '.join(SERVE_ENGINES)}; not {self.engine!r}"
            )

    @property
    def nodes(self) -> int:
        return self.placement.nodes


def serve_line(d: ServeDeploy) -> str:
    """The engine's launch line with what a cluster adds: host and port, revision, expert
    parallelism, the Ray backend for vLLM across nodes."""
    words = shlex.split(d.launch) + ["--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    if d.revision:
        words += ["--revision", d.revision]
    if d.expert_parallel:
        words += ["--enable-expert-parallel"] if d.engine == "vllm" else ["--ep-size", str(d.tp)]
    if d.engine == "vllm" and d.nodes > 1:
        words += ["--distributed-executor-backend", "ray"]
    return shlex.join(words)


def _wait_for_ray(nodes: int) -> str:
    """A shell loop until the Ray cluster counts `nodes` live nodes."""
    check = (
        "import ray,sys; ray.init(address='auto'); "
        f"sys.exit(0 if sum(n['Alive'] for n in ray.nodes()) >= {nodes} else 1)"
    )
    return f"until python3 -c {shlex.quote(check)}; do sleep 5; done"


def leader_script(d: ServeDeploy, head: str) -> str:
    """What the first node of a replica runs (`head`: how the other nodes reach it)."""
    line = serve_line(d)
    if d.nodes == 1:
        return f"exec {line}"
    if d.engine == "vllm":
        return f"ray start --head --port={RAY_PORT} && {_wait_for_ray(d.nodes)} && exec {line}"
    return f"exec {_sglang_multinode(line, d.nodes, '0', head)}"


def worker_script(d: ServeDeploy, head: str, rank: str) -> str:
    """What node `rank` (≥ 1) of a replica runs."""
    if d.engine == "vllm":
        return f"exec ray start --address={head}:{RAY_PORT} --block"
    return f"exec {_sglang_multinode(serve_line(d), d.nodes, rank, head)}"


def _sglang_multinode(line: str, nodes: int, rank: str, head: str) -> str:
    # rank and head may be shell/Kubernetes variables: appended unquoted on purpose
    return f"{line} --nnodes {nodes} --node-rank {rank} --dist-init-addr {head}:{SGLANG_DIST_PORT}"


def engine_line(script: str) -> str:
    """The engine's launch line inside a node's script (reading a manifest back): the first
    command, line by line and `&&` by `&&`, that starts vLLM or SGLang."""
    for part in re.split(r"&&|\n", script):
        part = part.strip().removeprefix("exec ").strip()
        if part.startswith(("vllm serve", "python3 -m sglang.launch_server", "python -m sglang")):
            return part
    raise GpuplanError("no vLLM or SGLang launch line found in the manifest's commands")
