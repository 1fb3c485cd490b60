"""Training frameworks: one memory profile each (profile.py), and readers of their configs.

    torchtitan.py   a torchtitan job TOML (train_configs/*.toml)
    torchtune.py    a torchtune recipe YAML
    megatron.py     Megatron-LM pretrain_gpt.py flags
    deepspeed.py    a DeepSpeed JSON config (ds_config)
    hf_trainer.py   Hugging Face TrainingArguments (JSON)
    fsdp2.py, ddp.py  the PyTorch loops' own knobs

A reader turns the text of a config into `TrainOverrides` (engine/frameworks/overrides.py): the
train() arguments that config sets. Nothing here opens a file.
"""

from gpuplan.engine.frameworks.profile import GENERIC, FrameworkProfile, validate_profile

__all__ = ["GENERIC", "FrameworkProfile", "validate_profile"]
