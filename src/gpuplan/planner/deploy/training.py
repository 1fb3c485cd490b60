"""A training export (planner/training_export.py) as what each node of the job runs.

Every node starts one launcher agent with the node's rank and the first node's address:
- Megatron-LM and DeepSpeed run under torchrun (`--nnodes N --nproc_per_node G --node_rank R
  --master_addr A --master_port P`, torch.distributed.run's static rendezvous); DeepSpeed reads
  the ranks torchrun sets (deepspeed.init_distributed), so no hostfile or ssh is needed.
- Accelerate's FSDP launcher takes the same facts as `--machine_rank`, `--main_process_ip`,
  `--main_process_port` (accelerate/commands/launch.py).
Config files the export writes (ds_config.json, accelerate_fsdp.json) are created by the node's
script before the launcher starts.
"""

from __future__ import annotations

import json
import shlex

from gpuplan.engine.frozen import record
from gpuplan.planner.deploy.placement import TORCHRUN_PORT
from gpuplan.planner.training_export import TrainExport

CONFIG_FILES = {"deepspeed": "ds_config.json", "fsdp": "accelerate_fsdp.json"}


@record
class TrainDeploy:
    name: str
    export: TrainExport
    nodes: int
    per_node: int

    def files(self) -> dict[str, str]:
        """The config files the launch line reads, by name."""
        if self.export.config is None:
            return {}
        return {CONFIG_FILES[self.export.engine]: json.dumps(self.export.config, indent=2)}


def launcher(t: TrainDeploy, rank: str, master: str) -> str:
    """The node's launch line (`rank` and `master` may be shell variables: left unquoted)."""
    words = shlex.split(t.export.command)
    if t.export.engine == "fsdp":  # accelerate launch … --num_machines N SCRIPT
        head, script = words[:-1], words[-1]
        extra = f"--machine_rank {rank} --main_process_ip {master}"
        return f"{shlex.join(head)} {extra} --main_process_port {TORCHRUN_PORT} {script}"
    # megatron: torchrun --nproc_per_node G --nnodes N SCRIPT ARGS;
    # deepspeed: deepspeed [--hostfile … --num_nodes N] --num_gpus G SCRIPT --deepspeed ds_config.json
    skip = 5 if t.export.engine == "megatron" else words.index("--num_gpus") + 2
    rest = words[skip:]
    torchrun = ["torchrun", "--nnodes", str(t.nodes), "--nproc_per_node", str(t.per_node)]
    rdzv = f"--node_rank {rank} --master_addr {master} --master_port {TORCHRUN_PORT}"
    return f"{shlex.join(torchrun)} {rdzv} {shlex.join(rest)}"


def _write_files(t: TrainDeploy) -> str:
    return "".join(
        f"cat > {name} <<'GPUPLAN_EOF'\n{text}\nGPUPLAN_EOF\n" for name, text in t.files().items()
    )


def node_script(t: TrainDeploy, rank: str, master: str) -> str:
    """A Kubernetes pod's script: write the config files, then exec the launcher."""
    return f"{_write_files(t)}exec {launcher(t, rank, master)}\n"


def sky_run(t: TrainDeploy) -> str:
    """A SkyPilot task's `run`: ranks from SKYPILOT_NODE_RANK and SKYPILOT_NODE_IPS (the
    config files are written by the task's `setup`)."""
    return (
        'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        f"{launcher(t, '$SKYPILOT_NODE_RANK', '$MASTER_ADDR')}\n"
    )
