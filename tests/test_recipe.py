"""Recipe validation: every mistake is one line with the file, the key and a suggestion; exit 2."""

from __future__ import annotations

import pytest

from toolkit.cli import main
from toolkit.errors import BadInput
from conftest import MINI_RECIPE as BASE
from toolkit.recipe.load import load_recipe



def test_extends_inherits_and_patch_lists_extend(project):
    project.patch("a.patch", "x")
    project.patch("b.patch", "x")
    project.recipe("base", BASE + '[patches]\nmini = ["a.patch"]\n')
    project.recipe("child", 'extends = "base"\ndescription = "child"\n[patches]\nmini = ["b.patch"]\n[server.args]\nep-size = 2\n')
    r = load_recipe(project.recipes / "child.toml")
    assert r.description == "child"
    assert r.patch_names("mini") == ("a.patch", "b.patch")
    assert dict(r.server.args) == {"tp-size": 2, "ep-size": 2}
    assert r.benchmark.concurrency == (1, 2)
    assert r.sources["mini"].rev == "v1"


@pytest.mark.parametrize(
    "text, needle",
    [
        (BASE + "[server]\nmodle = 'x'\n", "unknown key `server.modle` (did you mean `model`?)"),
        (BASE.replace('rev = "v1"', "rev = 1"), "`sources.mini.rev` must be string"),
        (BASE + '[patches]\nmini = ["nope.patch"]\n', "nope.patch does not exist"),
        (BASE + "[benchmark\n", "TOML syntax error"),
        ('descriptoin = "x"\n' + BASE, "did you mean `description`?"),
        (BASE + '[build]\nmode = "overlayy"\n', "did you mean `overlay`?"),
        (BASE + '[build]\narch = ["sm120"]\n', "not an arch like 12.0a"),
        (BASE + '[patches]\nminii = []\n', "did you mean `mini`?"),
        # sglang's command line pasted as a list: the table it means, spelled out
        (BASE.replace("[server.args]\ntp-size = 2\n", "") + '[server]\nargs = ["--ep-size", "8", "--enable-dp-attention"]\n',
         "[server.args] ep-size = 8; enable-dp-attention = true"),
    ],
)
def test_bad_recipes_are_one_line_errors(project, text, needle, capsys):
    path = project.recipe("bad", text)
    with pytest.raises(BadInput) as exc:
        load_recipe(path)
    assert needle in str(exc.value)
    assert str(path) in str(exc.value)
    assert "\n" not in str(exc.value)
    assert main(["apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle.split("(")[0].strip() in err


def test_extends_cycle(project):
    project.recipe("a", 'extends = "b"\n')
    project.recipe("b", 'extends = "a"\n')
    with pytest.raises(BadInput, match="cycle: a -> b -> a"):
        load_recipe(project.recipes / "a.toml")


def test_variables_expand_with_defaults(project, monkeypatch):
    project.recipe("v", BASE + '[roofline]\nmodel = "${PB_TEST_MODELS:-/models}/glm"\n')
    monkeypatch.delenv("PB_TEST_MODELS", raising=False)
    assert load_recipe(project.recipes / "v.toml").roofline["model"] == "/models/glm"
    monkeypatch.setenv("PB_TEST_MODELS", "/data")
    assert load_recipe(project.recipes / "v.toml").roofline["model"] == "/data/glm"
    project.recipe("w", BASE + '[roofline]\nmodel = "${PB_TEST_UNSET_VAR}/glm"\n')
    with pytest.raises(BadInput, match="PB_TEST_UNSET_VAR"):
        load_recipe(project.recipes / "w.toml")


def test_unknown_recipe_name_suggests(project, monkeypatch):
    project.recipe("baseline", BASE)
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(project.recipes))
    with pytest.raises(BadInput, match="did you mean `baseline`"):
        load_recipe("baselin")
