"""The code's shape (issue 25), read from the source with `ast`:

- no function over 80 lines, no class over 300 (the developers' guide: short functions);
- no import of a gpuplan module inside a function outside the entry points cli/ and web/: the
  import graph is read at the top of each module, and the cold start is kept lean by the graph
  (tests/test_cli_fast.py checks what `serve --json` loads), not by imports hidden in functions;
- inside a function (outside cli/ and web/), only the optional or heavy dependencies of LAZY_OK
  may be imported: a third-party package an install may lack or that costs a cold start
  milliseconds, or a standard-library module that costs half a millisecond or more and that a
  catalog-model serving answer never needs (any other module is imported at the module's top).

KNOWN_* list today's violators that other work is removing; each list may only shrink: a new
violation fails, and so does an entry that is no longer one (delete it when it is fixed).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "gpuplan"
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300
ENTRY_POINTS = ("cli/", "web/")  # lazy imports allowed: each command loads only what it runs

# Top-level module names that may be imported inside a function (outside cli/ and web/).
LAZY_OK = frozenset(
    {
        # optional or heavy third-party dependencies (pyproject's extras; the developers' guide)
        "numpy",
        "torch",
        "transformers",
        "huggingface_hub",
        "safetensors",
        "gguf",
        "pydantic",
        "yaml",
        "fastapi",
        "starlette",
        "uvicorn",
        "mcp",
        "requests",
        "httpx",
        # standard-library modules of half a millisecond or more that a catalog-model serving
        # answer never needs (python -X importtime, after the `serve --json` path is loaded)
        "dataclasses",  # imports inspect, ast, dis, tokenize: engine/frozen.py's reason to be
        "tomllib",  # a data file's parser: only on a compiled-cache miss (datafiles.py)
        "fractions",  # with decimal: exact per-parameter bits, not needed to look a model up
        "pathlib",  # a model that is not a catalog name (a local path, the HF cache)
        "difflib",  # the "did you mean" of an unknown name: the error path
        "concurrent",  # a thread pool for many safetensors headers
        "html",  # a notebook's HTML view of a plan
        "copy",  # frozen.asdict of a value that is not a record, container or scalar
    }
)

# Today's violators, "path:function" (path under src/gpuplan). Only ever delete from these.
KNOWN_LONG_FUNCTIONS: set[str] = set()
KNOWN_LONG_CLASSES: set[str] = set()
# "path:function: module" for each import inside a function that the rules above forbid
KNOWN_FUNCTION_IMPORTS: set[str] = {
    # the API (helper "records")
    "api/__init__.py:__getattr__: importlib",
    "api/common.py:quantized_format: gpuplan.engine.module_plan",
    # the catalog: the one lazy boundary left — a catalog name must not load the readers (≈7 ms:
    # pathlib, fractions, the checkpoint model, the safetensors/GGUF/Hub readers); it goes when the
    # API resolves a catalog name without catalog/sources/find.py
    "catalog/models.py:resolve_source: gpuplan.catalog.sources.find",
    # the model reader (helper "reader")
    # the training frameworks (helper "training")
    # the engine profiles (helper "logs")
    # the speed model (helper "speed")
}


def _files() -> list[tuple[str, ast.Module]]:
    return [
        (p.relative_to(PACKAGE).as_posix(), ast.parse(p.read_text(encoding="utf-8")))
        for p in sorted(PACKAGE.rglob("*.py"))
    ]


def _span(node: ast.AST) -> int:
    return int(node.end_lineno or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]


def _long_definitions(path: str, tree: ast.Module) -> tuple[list[str], list[str]]:
    """'path:Qual.name (N lines)' of functions over 80 lines and classes over 300."""
    functions: list[str] = []
    classes: list[str] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                is_class = isinstance(child, ast.ClassDef)
                if _span(child) > (MAX_CLASS_LINES if is_class else MAX_FUNCTION_LINES):
                    (classes if is_class else functions).append(f"{path}:{name}")
                walk(child, f"{name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return functions, classes


def _absolute(path: str, node: ast.ImportFrom) -> str:
    """The module an `from … import` names, relative imports resolved against `path`."""
    if not node.level:
        return node.module or ""
    package = ["gpuplan", *path.split("/")[:-1]]  # a module's package, or __init__'s own
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _function_imports(path: str, tree: ast.Module) -> list[tuple[str, str]]:
    """(function's qualified name, module) of every import inside a function body."""
    found: list[tuple[str, str]] = []

    def walk(node: ast.AST, prefix: str, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                is_function = not isinstance(child, ast.ClassDef)
                walk(child, f"{name}.", name if is_function else function)
            elif function is not None and isinstance(child, ast.Import):
                found.extend((function, alias.name) for alias in child.names)
            elif function is not None and isinstance(child, ast.ImportFrom):
                found.append((function, _absolute(path, child)))
            else:
                walk(child, prefix, function)

    walk(tree, "", None)
    return found


def _forbidden(module: str) -> bool:
    top = module.split(".")[0]
    return top == "gpuplan" or top not in LAZY_OK


def _check(found: set[str], known: set[str], what: str) -> None:
    new = sorted(found - known)
    stale = sorted(known - found)
    assert not new, f"{what} (issue 25), fix these:\n  " + "\n  ".join(new)
    assert not stale, f"{what}: fixed — delete from this test's KNOWN list:\n  " + "\n  ".join(
        stale
    )


def test_no_long_functions_or_classes() -> None:
    functions: set[str] = set()
    classes: set[str] = set()
    for path, tree in _files():
        f, c = _long_definitions(path, tree)
        functions.update(f)
        classes.update(c)
    _check(functions, KNOWN_LONG_FUNCTIONS, f"functions over {MAX_FUNCTION_LINES} lines")
    _check(classes, KNOWN_LONG_CLASSES, f"classes over {MAX_CLASS_LINES} lines")


def test_imports_inside_functions_only_where_allowed() -> None:
    found = {
        f"{path}:{function}: {module}"
        for path, tree in _files()
        if not path.startswith(ENTRY_POINTS)
        for function, module in _function_imports(path, tree)
        if _forbidden(module)
    }
    _check(found, KNOWN_FUNCTION_IMPORTS, "imports inside functions outside cli/ and web/")


def test_the_scanner_sees_what_it_must() -> None:
    """The rules' own reading, on a small source: nested functions, methods, relative imports."""
    source = (
        "import os\n"
        "def outer():\n"
        "    import json\n"
        "    def inner():\n"
        "        from . import units\n"
        "        from .engine import frozen\n"
        "        import numpy\n"
        "class C:\n"
        "    def m(self):\n"
        "        from gpuplan.errors import GpuplanError\n"
    )
    found = _function_imports("catalog/x.py", ast.parse(source))
    assert found == [
        ("outer", "json"),
        ("outer.inner", "gpuplan.catalog"),
        ("outer.inner", "gpuplan.catalog.engine"),
        ("outer.inner", "numpy"),
        ("C.m", "gpuplan.errors"),
    ]
    assert [m for _, m in found if _forbidden(m)] == [
        "json",
        "gpuplan.catalog",
        "gpuplan.catalog.engine",
        "gpuplan.errors",
    ]
    long_body = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert _long_definitions("m.py", ast.parse(long_body)) == (["m.py:f"], [])
    assert _long_definitions("m.py", ast.parse("def f():\n    pass\n")) == ([], [])
