"""vLLM's version rules (versions.toml beside this file), loaded once."""

from __future__ import annotations

from pathlib import Path

from gpuplan.engine.profiles.common import load_version_rules

RULES = load_version_rules(Path(__file__).with_name("versions.toml"))
