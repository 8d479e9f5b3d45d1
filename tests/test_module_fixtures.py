"""A module-scoped fixture is built once per pytest-xdist worker that runs one of its tests, and
`nox -s tests` runs `--dist loadgroup`: the tests of a module without an xdist_group mark go one by one
to whichever worker is free, so a costly module fixture (a campaign of miniature launches, torch
probes) was built again on several workers. Each test that asks for a module fixture carries a group
mark (its own or the module's `pytestmark`), or its module is named below with why its fixture costs
(next to) nothing."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CHEAP = {
    "test_minisglang.py": "one miniature server started from source (~0.3 s), no env built",
    "test_model_shape.py": "a model config read from the package",
    "test_history.py": "the releases are built once under TEST_CACHE (build_once) for every worker",
    "test_release_bisect.py": "the releases are built once under TEST_CACHE (build_once) for every worker",
    "test_oea.py": "torch imported by each process anyway; the routed check is once_per_run",
}


def _is_module_fixture(node: ast.FunctionDef) -> bool:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call) and ast.unparse(dec.func).endswith("fixture"):
            if any(k.arg == "scope" and ast.unparse(k.value) == "'module'" for k in dec.keywords):
                return True
    return False


def _has_group(decorators) -> bool:
    return any("xdist_group" in ast.unparse(d) for d in decorators)


def _ungrouped_users(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    fixtures = {f.name for f in funcs if _is_module_fixture(f)}
    module_group = any(isinstance(n, ast.Assign) and any(ast.unparse(t) == "pytestmark" for t in n.targets)
                       and "xdist_group" in ast.unparse(n.value) for n in tree.body)
    if not fixtures or module_group:
        return []
    return [f"{path.name}::{f.name} ({', '.join(sorted(fixtures & {a.arg for a in f.args.args}))})"
            for f in funcs if f.name.startswith("test_") and fixtures & {a.arg for a in f.args.args}
            and not _has_group(f.decorator_list)]


def test_every_test_of_a_costly_module_fixture_runs_on_one_worker():
    ungrouped = [u for p in sorted(TESTS.glob("test_*.py")) if p.name not in CHEAP for u in _ungrouped_users(p)]
    assert not ungrouped, ("module fixtures built again on each worker that runs one of these (add "
                           f"`pytestmark = pytest.mark.xdist_group(...)` or name the module in CHEAP): {ungrouped}")


def test_the_rule_sees_an_ungrouped_user_and_a_grouped_module(tmp_path):
    src = ("import pytest\n@pytest.fixture(scope='module')\ndef costly():\n    return 1\n"
           "def test_a(costly):\n    pass\n@pytest.mark.xdist_group('g')\ndef test_b(costly):\n    pass\n"
           "def test_c(tmp_path):\n    pass\n")
    (tmp_path / "test_x.py").write_text(src)
    assert _ungrouped_users(tmp_path / "test_x.py") == ["test_x.py::test_a (costly)"]
    (tmp_path / "test_y.py").write_text("pytestmark = pytest.mark.xdist_group('y')\n" + src)
    assert _ungrouped_users(tmp_path / "test_y.py") == []
