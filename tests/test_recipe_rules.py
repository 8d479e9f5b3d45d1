"""Recipe rules a user relies on: where `extends` looks, what a child may replace, where patches may
live, what `show` and `schema` print, and how patch activation evidence is judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import MINI_RECIPE as BASE
from toolkit.cli import main
from toolkit.errors import BadInput
from toolkit.run.evidence import check_evidence
from toolkit.recipe.load import load_recipe

REPO = Path(__file__).resolve().parent.parent



def test_extends_names_are_relative_to_recipes_root(project):
    project.recipe("baseline", BASE)
    project.recipe("demo/baseline", BASE.replace('"base"', '"demo base"'))
    project.recipe("mine/exp", 'extends = "baseline"\n')
    project.recipe("mine/exp2", 'extends = "demo/baseline"\n')
    project.recipe("demo/sib", 'extends = "./baseline"\n')
    # a child without its own description names the parent it resolved to (and what it adds)
    assert load_recipe(project.recipes / "mine/exp.toml").description == "baseline + mine/exp: as it is"
    assert load_recipe(project.recipes / "mine/exp2.toml").description == "demo/baseline + mine/exp2: as it is"
    assert load_recipe(project.recipes / "demo/sib.toml").description == "demo/baseline + demo/sib: as it is"


def test_extends_of_a_sibling_name_suggests_the_full_name(project):
    project.recipe("demo/base2", BASE)
    project.recipe("demo/child", 'extends = "base2"\n')
    with pytest.raises(BadInput, match="did you mean `demo/base2`"):
        load_recipe(project.recipes / "demo/child.toml")


def test_child_of_the_same_kind_keeps_the_rest_of_the_source(project):
    project.recipe("base", BASE)
    project.recipe("child", 'extends = "base"\n[sources.mini]\nrev = "v2"\n')
    src = load_recipe(project.recipes / "child.toml").sources["mini"]
    assert (src.kind, src.rev, src.package_dir) == ("git", "v2", "python")
    project.recipe("child2", f'extends = "base"\n[sources.mini]\ngit = "{project.upstream}"\n')
    assert load_recipe(project.recipes / "child2.toml").sources["mini"].package_dir == "python"


def test_child_replaces_a_source_kind(project):
    project.recipe("base", BASE)
    project.recipe("child", f'extends = "base"\n[sources.mini]\npath = "{project.upstream}"\n')
    src = load_recipe(project.recipes / "child.toml").sources["mini"]
    assert src.kind == "path" and src.rev is None


def test_patch_path_outside_patches_is_refused(project, capsys):
    outside = project.root / "evil.patch"
    outside.write_text("x")
    path = project.recipe("r", BASE + '[patches]\nmini = ["../evil.patch"]\n')
    with pytest.raises(BadInput, match=r"`patches.mini`: patch path `../evil.patch` leaves"):
        load_recipe(path)
    (project.patches / "link.patch").symlink_to(outside)
    path = project.recipe("r2", BASE + '[patches]\nmini = ["link.patch"]\n')
    with pytest.raises(BadInput, match="leaves"):
        load_recipe(path)
    assert main(["apply", str(path)]) == 2
    assert "patches.mini" in capsys.readouterr().err


def test_patches_without_sources_suggest_extends(project):
    project.patch("a.patch", "x")
    path = project.recipe("r", '[patches]\nsglang = ["a.patch"]\n')
    with pytest.raises(BadInput, match="did you forget `extends"):
        load_recipe(path)


def test_show_prints_each_value_with_its_file(project, capsys):
    project.recipe("base", BASE)
    project.recipe("child", 'extends = "base"\n[server.args]\nep-size = 2\n')
    assert main(["show", str(project.recipes / "child.toml"), "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["server.args.ep-size"]["file"].endswith("child.toml")
    assert values["server.args.tp-size"]["file"].endswith("base.toml")
    assert values["sources.mini.rev"] == {"value": "v1", "file": str(project.recipes / "base.toml")}
    # an inherited evidence table keyed by a patch file name (its dots are not nesting) is the parent's
    project.patch("a.patch", "x")
    project.recipe("patched", BASE + '[patches]\nmini = ["a.patch"]\n[evidence."a.patch"]\nlog = "ran"\n')
    project.recipe("grandchild", 'extends = "patched"\n[server.args]\nep-size = 2\n')
    assert main(["show", str(project.recipes / "grandchild.toml"), "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert values["evidence.a.patch.log"]["file"].endswith("patched.toml")
    # a description the loader wrote (the child has none) is said to be generated from the child's settings,
    # not attributed to the parent's file
    assert values["description"]["generated"] is True and values["description"]["file"].endswith("grandchild.toml")
    assert "ep-size = 2" in values["description"]["value"]
    assert main(["show", str(project.recipes / "grandchild.toml")]) == 0
    assert "generated from what" in capsys.readouterr().out


def test_schema_validates_every_shipped_recipe(capsys):
    import tomllib

    jsonschema = pytest.importorskip("jsonschema")
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    files = sorted((REPO / "recipes").rglob("*.toml"))
    assert len(files) >= 10
    for f in files:
        jsonschema.validate(tomllib.loads(f.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"server": {"modle": "x"}}, schema)


def test_evidence_must_name_a_patch_of_the_recipe(project):
    project.patch("a.patch", "x")
    path = project.recipe("r", BASE + '[patches]\nmini = ["a.patch"]\n[evidence."b.patch"]\nlog = "x"\n')
    with pytest.raises(BadInput, match="names no patch of this recipe"):
        load_recipe(path)
    path = project.recipe("r2", BASE + '[patches]\nmini = ["a.patch"]\n[evidence."a.patch"]\nlog = "(x"\n')
    with pytest.raises(BadInput, match="not a valid regex"):
        load_recipe(path)


def test_evidence_verdicts_and_metrics(project):
    project.patch("a.patch", "x")
    project.patch("b.patch", "x")
    project.patch("c.patch", "x")
    path = project.recipe("r", BASE + """
[patches]
mini = ["a.patch", "b.patch", "c.patch"]
[evidence."a.patch"]
log = 'OEA active: tokens=\\d+ distinct_before=(?P<experts_before>\\d+) distinct_after=(?P<distinct_experts>\\d+)'
min_count = 2
[evidence."b.patch"]
server_info = { enable_sbo = true }
""")
    recipe = load_recipe(path)
    log = ("INFO OEA active: tokens=16 distinct_before=62 distinct_after=30\n"
           "noise\nINFO OEA active: tokens=16 distinct_before=60 distinct_after=34\n")
    v = check_evidence(["a.patch", "b.patch", "c.patch"], recipe.evidence, log, {"enable_sbo": True})
    assert v.ok and v.status == {"a.patch": "ok", "b.patch": "ok", "c.patch": "undeclared"}
    assert v.metrics == {"experts_before": 61.0, "distinct_experts": 32.0}
    v = check_evidence(["a.patch", "b.patch"], recipe.evidence, log.splitlines()[0], {"enable_sbo": False})
    assert not v.ok and v.status == {"a.patch": "missing", "b.patch": "missing"}
    assert v.problems[0].startswith("a.patch: 1 of >= 2 ")
    assert "enable_sbo = False, expected True" in v.problems[1]
    # where the numbers were measured: eager Python calls, unless the line says it counted on the device
    from toolkit.run.evidence import metrics_source

    v = check_evidence(["a.patch"], recipe.evidence, log, None)
    assert metrics_source(v, ["--tp-size", "8"])["distinct_experts"] == "from 2 eager calls, outside CUDA graphs"
    assert metrics_source(v, ["--disable-decode-cuda-graph"])["distinct_experts"].startswith("from 2 calls (CUDA graphs")
    device = "".join(line + " (means of the first MoE layer over 300 decode step(s), counted on the device: CUDA-graph "
                     "replays included)\n" for line in log.splitlines() if "OEA" in line)
    v = check_evidence(["a.patch"], recipe.evidence, device, None)
    assert v.metrics["distinct_experts"] == 32.0
    assert metrics_source(v, [])["distinct_experts"] == ("from 2 log line(s) of device counts over the decode steps "
                                                        "(CUDA-graph replays included)")
def test_a_metric_from_a_server_without_decode_graphs_is_said_to_cover_every_step():
    """Real sglang 0.5.23 on CPU reports `cuda_graph_config.decode.backend = "disabled"` (and
    `disable_cuda_graph` False) at /server_info: a patch's log-line metric then came from every decode
    step, not from "eager calls, outside CUDA graphs" (which tells a reader the timed steps were not
    seen). Without /server_info, 0.5.23's own spelling `--cuda-graph-backend-decode disabled` counts as
    the deprecated `--disable-cuda-graph` does."""
    from toolkit.recipe.spec import EvidenceSpec
    from toolkit.run.evidence import metrics_source

    real = json.loads((REPO / "tests/data/sglang-0.5.23-cpu-server-info.json").read_text())["server_info"]
    assert real["cuda_graph_config"]["decode"]["backend"] == "disabled" and real["disable_cuda_graph"] is False
    spec = {"p": EvidenceSpec(patch="p", log=r"fp32 GEMM rows=(?P<rows>\d+)", min_count=1)}
    v = check_evidence(["p"], spec, "fp32 GEMM rows=8\nfp32 GEMM rows=8\n", real)
    argv = ["--device", "cpu", "--attention-backend", "torch_native"]
    assert metrics_source(v, argv, real) == {"rows": "from 2 calls (CUDA graphs disabled: every step eager)"}
    graphs_on = {**real, "cuda_graph_config": {**real["cuda_graph_config"],
                                               "decode": {**real["cuda_graph_config"]["decode"], "backend": "full"}}}
    assert metrics_source(v, argv, graphs_on) == {"rows": "from 2 eager calls, outside CUDA graphs"}
    for flags in (["--cuda-graph-backend-decode", "disabled"], ["--cuda-graph-backend-decode=disabled"]):
        assert metrics_source(v, flags)["rows"].startswith("from 2 calls (CUDA graphs disabled")
    assert metrics_source(v, ["--tp-size", "8"])["rows"] == "from 2 eager calls, outside CUDA graphs"


def test_shipped_patches_all_declare_evidence():
    for f in sorted((REPO / "recipes").rglob("*.toml")):
        recipe = load_recipe(f, REPO / "recipes")
        declared = set(recipe.evidence)
        for src in recipe.patches:
            for name in recipe.patch_names(src):
                assert name in declared, f"{recipe.name}: {name} declares no [evidence]"


def test_patch_errors_say_what_to_do(project, capsys):
    """A wrong path prefix names the prefix to strip; a stale patch shows the differing line and
    points at `patches rebase`."""
    from conftest import change

    project.patch("prefix.patch", change("STEP_MS = 10", "STEP_MS = 8", path="upstream/python/mini/cost.py"))
    project.patch("stale.patch", change("STEP_MS = 12", "STEP_MS = 8"))
    project.recipe("p", BASE + '[patches]\nmini = ["prefix.patch"]\n')
    project.recipe("s", BASE + '[patches]\nmini = ["stale.patch"]\n')
    assert main(["patches", "check", str(project.recipes / "p.toml"), "--json"]) == 1
    detail = json.loads(capsys.readouterr().out)["patches"][0]["detail"]
    assert "carry an extra `upstream/`" in detail
    assert main(["patches", "check", str(project.recipes / "s.toml"), "--json"]) == 1
    detail = json.loads(capsys.readouterr().out)["patches"][0]["detail"]
    assert "line 1 expected `STEP_MS = 12`, the tree has `STEP_MS = 10`" in detail
    assert "patchbench patches rebase" in detail


def test_a_misspelt_recipe_is_no_such_recipe_in_store_verbs(home, monkeypatch, capsys):
    monkeypatch.setenv("PATCHBENCH_RECIPES", str(REPO / "recipes"))
    for verb in (["compare", "demo/baseline", "demo/fasst"], ["report", "demo/baseline", "demo/fasst"]):
        assert main(verb) == 2
        err = capsys.readouterr().err
        assert "no such recipe `demo/fasst`" in err and "did you mean `demo/fast`?" in err
