"""The import graph holds its layers (issue 25): cli → web → api → planner → catalog → engine →
units / lookup / data files → errors, nothing pointing up, and no cycle between sibling modules
or packages. The contracts live in pyproject.toml ([tool.importlinter]); import-linter checks
them on the package as imported (annotation-only imports under TYPE_CHECKING excluded)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    script = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "2 kept, 0 broken" in r.stdout
