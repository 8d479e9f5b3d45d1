"""Real PyPI artifacts: sglang 0.5.10.post1 (sdist), 0.5.23 (wheel), flashinfer-python 0.7.2 (sdist).

Downloaded once per CI run into a shared cache (PATCHBENCH_TEST_HOME), sha256-checked by the tool.
A patch written against sglang's git layout (python/sglang/...) must apply unchanged to both.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import TEST_CACHE, git
from toolkit.cli import main
from toolkit.recipe.load import load_recipe
from toolkit.tree.applied import apply_recipe

pytestmark = pytest.mark.slow

SHARED_HOME = TEST_CACHE  # conftest: one shared cache for every test

# Touches a file whose neighbourhood is the same in both releases (the version module) and adds a
# module: both in git layout.
GIT_LAYOUT_PATCH = """\
Subject: probe: a git-layout patch

diff --git a/python/sglang/patchbench_probe.py b/python/sglang/patchbench_probe.py
new file mode 100644
--- /dev/null
+++ b/python/sglang/patchbench_probe.py
@@ -0,0 +1 @@
+APPLIED = True
"""


def _recipe(tmp: Path, version: str, patches: list[str]) -> Path:
    (tmp / "recipes").mkdir(parents=True, exist_ok=True)
    (tmp / "patches").mkdir(exist_ok=True)
    (tmp / "patches" / "probe.patch").write_text(GIT_LAYOUT_PATCH)
    stack = ", ".join(f'"{p}"' for p in patches)
    path = tmp / "recipes" / f"sg-{version}.toml"
    path.write_text(textwrap.dedent(f"""
        [sources.sglang]
        pypi = "sglang=={version}"
        package_dir = "python"
        [patches]
        sglang = [{stack}]
    """))
    return path


@pytest.mark.parametrize("version, layout", [("0.5.10.post1", "sdist"), ("0.5.23", "wheel")])
def test_git_layout_patch_applies_to_pypi_tree(tmp_path, version, layout):
    SHARED_HOME.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(_recipe(tmp_path, version, ["probe.patch"]))
    [(tree, _)] = apply_recipe(recipe, SHARED_HOME)
    assert tree.layout == layout and tree.package_dir == ""
    assert (tree.path / "sglang" / "patchbench_probe.py").read_text() == "APPLIED = True\n"
    assert (tree.path / "sglang" / "srt" / "server_args.py").is_file()
    assert git(tree.path, "log", "-1", "--format=%s") == "probe: a git-layout patch"
    assert len(tree.origin["artifact"]["sha256"]) == 64


def test_baseline_applies_offline_second_time(tmp_path, capsys):
    """The shipped baseline: first run downloads and applies; the second reuses (even offline)."""
    SHARED_HOME.mkdir(parents=True, exist_ok=True)
    assert main(["apply", "baseline", "--home", str(SHARED_HOME)]) == 0
    capsys.readouterr()
    assert main(["apply", "baseline", "--home", str(SHARED_HOME), "--offline", "--frozen", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert {t["source"] for t in out["trees"]} == {"sglang", "flashinfer"}
    assert all(t["reused"] for t in out["trees"])
    fi = next(t for t in out["trees"] if t["source"] == "flashinfer")
    assert fi["layout"] == "sdist" and Path(fi["path"], "flashinfer").is_dir()
