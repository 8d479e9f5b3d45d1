"""The stage packages import one way: a lower stage never imports a higher one (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

TOOLKIT = Path(__file__).resolve().parent.parent / "toolkit"

# Lowest first. A module may import its own layer and any lower one. `results` sits below `run`: the
# run stage writes each run into the store as it happens, and the store never looks back at a run.
LAYERS = [
    {"errors", "resources", "digest", "workspace", "build_once", "roofline", "probes", "models", "__init__"},
    {"recipe"},
    {"tree"},
    {"envs"},
    {"results"},
    {"run"},
    {"analysis", "profile", "kernels", "history"},
    {"report"},
    {"executors"},
    {"commands", "cli", "__main__"},
]


def _layer(top: str) -> int:
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"toolkit/{top} is in no layer of tests/test_layers.py: place it")


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("toolkit"):
            if node.module == "toolkit":
                yield from (a.name for a in node.names)
            else:
                yield node.module.split(".")[1]
        elif isinstance(node, ast.Import):
            yield from (a.name.split(".")[1] for a in node.names if a.name.startswith("toolkit."))


def test_every_import_points_down_the_stages():
    wrong = []
    for path in sorted(TOOLKIT.rglob("*.py")):
        rel = path.relative_to(TOOLKIT)
        own = _layer(rel.parts[0].removesuffix(".py"))
        for top in _imports(path):
            if top == "__version__":
                continue
            if _layer(top) > own:
                wrong.append(f"toolkit/{rel} imports toolkit.{top}")
    assert not wrong, "\n".join(wrong)


def test_top_level_reads_as_the_data_flow():
    modules = {p.stem for p in TOOLKIT.glob("*.py")}
    assert modules <= {"__init__", "__main__", "cli", "errors", "resources", "digest", "workspace", "build_once"}, modules
    assert not (TOOLKIT / "build").exists()
    for pkg in ("recipe", "tree", "envs", "results", "run", "analysis", "report"):
        doc = ast.get_docstring(ast.parse((TOOLKIT / pkg / "__init__.py").read_text())) or ""
        assert "import" in doc, f"toolkit/{pkg}/__init__.py should say what it may import"


def test_no_module_is_over_500_lines():
    """Small modules, one concept each: a module past 500 lines is split (the house rule the review's
    import_graph tool checks; toolkit/analysis/sequential.py had grown to 515)."""
    long = [f"toolkit/{p.relative_to(TOOLKIT)}: {n} lines" for p in sorted(TOOLKIT.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 500]
    assert not long, "\n".join(long)
