"""A static check says what it could not check: a probe whose resolution raises (not one of sglang's
refusals) is `unresolved`, printed as a warning, never remembered as a pass, and an error (exit 2)
under `--strict-check` or `[target] strict = true`. The recipe's `[server.env]` reaches the probe and
is part of the check's key; a missing model config names the shape rules that did not run."""

from __future__ import annotations

import json
import shutil

from conftest import REPO_ROOT
from toolkit.cli import main
from toolkit.recipe.load import load_recipe
from toolkit.run.pipeline import prepare

# The miniature, with a resolution step that needs a platform fact this machine cannot give,
# unless the server's environment says so (as sglang reads SGLANG_* variables while resolving).
RESOLVE = '''    def resolve_once(self) -> "ServerArgs":
        """sglang >= 0.5.23 resolves defaults here; the miniature already did in __post_init__."""
        return self
'''
RAISES = '''    def resolve_once(self) -> "ServerArgs":
        if os.environ.get("SGLANG_FAKE_PLATFORM") != "1":
            raise RuntimeError("cannot query the platform: libcudart.so.12 not found")
        return self
'''

RECIPE = """
description = "unresolved check"
[sources.sglang]
path = "../mini"
package_dir = "python"
[server]
model = "mini"
gpus = 0
[server.args]
tp-size = 2
[benchmark]
concurrency = [1]
num_prompts = 2
output_len = 4
warmup = 0
repeats = 1
"""


def _project(tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(REPO_ROOT / "upstream" / "minisglang", root / "mini",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    args = root / "mini" / "python" / "sglang" / "srt" / "server_args.py"
    text = args.read_text()
    assert RESOLVE in text
    args.write_text(text.replace(RESOLVE, RAISES))
    (root / "recipes").mkdir()
    return root


def test_unresolved_check_warns_is_not_remembered_and_fails_when_strict(tmp_path, home, capsys):
    root = _project(tmp_path)
    path = root / "recipes" / "u.toml"
    path.write_text(RECIPE)

    assert main(["run", str(path), "--until", "check"]) == 0
    err = capsys.readouterr().err
    assert "static check unresolved: RuntimeError: cannot query the platform: libcudart.so.12 not found" in err
    assert "passed" not in err
    # the shape rules had no model config: said, by name
    assert "model-shape rules not run" in err and "ep-divides-experts" in err
    assert not list((home / "checks").glob("*.json"))  # not remembered as a pass

    check = prepare(load_recipe(path), home, until="check").check
    assert check.unresolved and check.outcome.startswith("unresolved: RuntimeError")
    assert not list((home / "checks").glob("*.json"))

    assert main(["run", str(path), "--until", "check", "--strict-check"]) == 2
    assert "static check unresolved: RuntimeError" in capsys.readouterr().err

    # without --strict-check the run goes on, and says with its numbers what was not checked
    assert main(["run", str(path)]) == 0
    out = tmp_path / "export.json"
    assert main(["results", "--export", "json", "-o", str(out)]) == 0
    [run] = json.loads(out.read_text())["runs"]
    assert run["extra"]["static_check_outcome"].startswith("unresolved: RuntimeError: cannot query the platform")
    assert "ep-divides-experts" in run["extra"]["static_check_warnings"][0]
    capsys.readouterr()

    path.write_text(RECIPE + '[target]\ngpu = "h100"\nstrict = true\n')
    assert main(["run", str(path), "--until", "check"]) == 2
    # beside a recipe that passes: the other is checked, and the refusal still exits 2
    fine = root / "recipes" / "fine.toml"
    fine.write_text(RECIPE + '[server.env]\nSGLANG_FAKE_PLATFORM = "1"\n')
    assert main(["run", str(path), str(fine), "--until", "check"]) == 2
    assert "static check passed" in capsys.readouterr().err

    # [server.env] is set for the probe: resolution runs, the check passes and is remembered
    path.write_text(RECIPE + '[server.env]\nSGLANG_FAKE_PLATFORM = "1"\n')
    assert main(["run", str(path), "--until", "check", "--strict-check"]) == 0
    assert "static check passed" in capsys.readouterr().err
    assert len(list((home / "checks").glob("*.json"))) == 1
    again = prepare(load_recipe(path), home, until="check")
    assert again.check.outcome == "ok" and again.timings["check"] < 1.0
    # another value of the same variable is another check (the key holds [server.env])
    path.write_text(RECIPE + '[server.env]\nSGLANG_FAKE_PLATFORM = "0"\n')
    assert prepare(load_recipe(path), home, until="check").check.unresolved


def test_profile_strict_check_refuses_an_unresolved_check(tmp_path, home, capsys):
    """`profile --strict-check` refuses the recipe before any launch, as `run --strict-check` does."""
    root = _project(tmp_path)
    path = root / "recipes" / "u.toml"
    path.write_text(RECIPE)
    assert main(["profile", str(path), "--strict-check"]) == 2
    assert "static check unresolved: RuntimeError" in capsys.readouterr().err
