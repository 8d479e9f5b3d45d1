"""A sweep's variants that sglang resolves to one server (a flag given its default value, `auto`
resolved to a backend) are launched once, recognised at the verify step from /server_info, and
reported as "same server as NAME" with that one's numbers: never benchmarked twice, never two rows
that are one server. On the miniature (its `--attention-backend` resolves to flashinfer when not
given, as sglang resolves backends) and, slow, on real sglang 0.5.23 (`--stream-interval 1`, its
default)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import MINI_SERVED, REPO_ROOT, demo_project
from toolkit.cli import main
from toolkit.results.store import Store
from toolkit.run.same_server import resolved

SAME = """
description = "same-server test"
""" + MINI_SERVED + """[server.args]                           # no --random-seed: the miniature picks one per launch, as sglang does
mini-step-base-ms = 3
mini-step-per-seq-us = 500
[benchmark]
input_len = 8
output_len = 8
concurrency = [2]
num_prompts = 4
warmup = 1
repeats = 2
[matrix]
server.args.attention-backend = ["flashinfer", "triton"]
benchmark.input_len = [8, 12]           # input_len 12: the default's server under another benchmark
"""
FI = "demo/same[attention-backend=flashinfer,input_len=8]"


@pytest.mark.parametrize("design", [["--fixed"], []], ids=["fixed", "sequential"])
def test_a_variant_sglang_resolves_to_the_default_is_launched_once_and_reported_as_it(
        tmp_path, monkeypatch, home, capsys, design):
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "same.toml").write_text(SAME)
    assert main(["sweep", "demo/same", "--json", "-o", str(proj / "out"), *design]) == 0
    doc = json.loads(capsys.readouterr().out)
    store = Store(home / "results.sqlite")
    runs = store.runs()
    # one launch of the flashinfer variant, stopped at the verify step: no samples, named as the default's server
    (fi,) = [r for r in runs if r.recipe == FI]
    assert fi.status == "ok" and fi.extra["kind"] == "verify" and fi.extra["same_server_as"] == "demo/same"
    assert not store.samples([fi.run_id])
    default = [r for r in runs if r.recipe == "demo/same"]
    # what it rests on: sglang's resolution of both launches is one configuration (the seeds it picked aside)
    assert fi.server_info["attention_backend"] == default[0].server_info["attention_backend"] == "flashinfer"
    assert fi.server_info["random_seed"] != default[0].server_info["random_seed"]
    assert resolved(fi.server_info, seed_given=False) == resolved(default[0].server_info, seed_given=False)
    # the variants that differ elsewhere are measured: another backend, the same server under another benchmark
    measured = {r.recipe for r in runs if store.samples([r.run_id])}
    assert measured == {"demo/same", "demo/same[attention-backend=flashinfer,input_len=12]",
                        "demo/same[attention-backend=triton,input_len=8]",
                        "demo/same[attention-backend=triton,input_len=12]"}, measured
    ranked = {r["variant"]: r for r in doc["ranked"]}
    assert ranked[FI]["verdict"] == "same server as demo/same"
    assert (ranked[FI]["mean"], ranked[FI]["n"]) == (ranked["demo/same"]["mean"], ranked["demo/same"]["n"])
    order = [r["variant"] for r in doc["ranked"]]
    assert order.index(FI) == order.index("demo/same") + 1  # beside the server it was
    by = {v["variant"]: v for v in doc["variants"]}
    assert by[FI]["same_server_as"] == "demo/same" and not by[FI]["failed"] and not by[FI]["runs"]
    assert f"| {FI} | 2 |" in (proj / "out" / "sweep.md").read_text()
    assert f"same server as demo/same: {FI}" in (proj / "out" / "sweep.md").read_text()
    # resumed: the stored launches say it is the default's server; it is not launched again
    launches = len(store.runs())
    assert main(["sweep", "demo/same", "--json", "-o", str(proj / "out"), *design]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [r.recipe for r in store.runs()[launches:] if r.recipe == FI] == []
    assert {r["variant"]: r["verdict"] for r in again["ranked"]}[FI] == "same server as demo/same"
    # the published site says why the variant has no points of its own
    assert main(["publish", "-o", str(proj / "site")]) == 0
    capsys.readouterr()
    page = " ".join((proj / "site" / "sweeps").glob("*.html").__next__().read_text().split())
    assert f"{FI}: same server as demo/same" in page, page[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_real_sglang_a_flag_at_its_default_is_the_same_server(tmp_path, capsys):
    """Real sglang 0.5.23 on this CPU (recipes/cpu/baseline, ~1.5-4 min a launch): the variant that
    passes `--stream-interval 1`, 0.5.23's default, launches a server whose /get_server_info is the
    default's but for per-launch fields (its launch_command holds the extra flag): one launch, no
    benchmark, reported as the default's server."""
    from sglang_server import SHARED_HOME

    base = os.path.relpath(REPO_ROOT / "recipes" / "cpu" / "baseline.toml", tmp_path)
    (tmp_path / "si.toml").write_text(f'extends = "{base}"\n[quality]\nlaunches = 0\n'
                                      '[matrix]\nserver.args.stream-interval = [1]\n')
    store_path = tmp_path / "results.sqlite"
    rc = main(["sweep", str(tmp_path / "si.toml"), "--fixed", "--repeats", "1", "--json", "-o", str(tmp_path / "o"),
               "--home", str(SHARED_HOME), "--store", str(store_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    doc = json.loads(out.out)
    runs = Store(store_path).runs()
    assert len(runs) == 2, [(r.recipe, r.status, r.error) for r in runs]
    default, variant = runs
    assert default.status == "ok" and Store(store_path).samples([default.run_id])
    assert variant.status == "ok" and variant.extra["same_server_as"] == default.recipe, (variant.status, variant.error)
    assert "--stream-interval 1" in variant.server_info["launch_command"]
    assert "--stream-interval" not in default.server_info["launch_command"]
    assert resolved(variant.server_info, seed_given=True) == resolved(default.server_info, seed_given=True)
    (row,) = [r for r in doc["ranked"] if r["variant"] == variant.recipe]
    assert row["verdict"] == f"same server as {default.recipe}"


def test_an_sla_search_does_not_search_the_defaults_server_twice(tmp_path, monkeypatch, home, capsys):
    """--sla: both start at the same concurrency; the flashinfer variant's first launch is the default's
    server, so it leaves the search and its row reads the default's limit and numbers."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "same.toml").write_text(
        SAME.replace("concurrency = [2]", "concurrency = [1, 8]").replace("benchmark.input_len = [8, 12]", ""))
    fi = "demo/same[attention-backend=flashinfer]"
    assert main(["sweep", "demo/same", "--sla", "itl_ms_median<=8", "--repeats", "1", "--json",
                 "-o", str(proj / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r.recipe for r in Store(home / "results.sqlite").runs()].count(fi) == 1
    ranked = {r["variant"]: r for r in doc["ranked"]}
    assert ranked[fi]["verdict"] == "same server as demo/same"
    assert (ranked[fi]["point"], ranked[fi]["mean"]) == (ranked["demo/same"]["point"], ranked["demo/same"]["mean"])
    assert {v["variant"]: v["same_server_as"] for v in doc["variants"]}[fi] == "demo/same"


def test_a_variant_measured_before_the_default_does_not_make_the_default_its_copy(tmp_path, monkeypatch, home, capsys):
    """The flashinfer variant run on its own first (`run NAME[...]`): the sweep still measures the default,
    and the variant, whose stored launches are the default's server, is the copy."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "same.toml").write_text(SAME.replace("benchmark.input_len = [8, 12]", ""))
    fi = "demo/same[attention-backend=flashinfer]"
    assert main(["run", fi, "--repeats", "1"]) == 0
    capsys.readouterr()
    assert main(["sweep", "demo/same", "--fixed", "--repeats", "1", "--json", "-o", str(proj / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {v["variant"]: v for v in doc["variants"]}
    assert by[fi]["same_server_as"] == "demo/same" and by["demo/same"]["same_server_as"] is None
    assert by["demo/same"]["runs"], by["demo/same"]
    assert {r["variant"]: r["verdict"] for r in doc["ranked"]}[fi] == "same server as demo/same"


def test_compare_and_report_of_a_variant_that_is_the_defaults_server_say_so(tmp_path, monkeypatch, home, capsys):
    """`compare V DEFAULT` of a variant the sweep found to be the default's server: no verdict of a server
    against itself (exit 2, as a recipe compared with itself), and the message names the configuration and
    the launch that showed it, not "no ok, verified results"; against another variant, and in `report`, it
    names the configuration whose numbers stand for it."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "same.toml").write_text(
        SAME.replace("benchmark.input_len = [8, 12]", "").replace("repeats = 2", "repeats = 1"))
    fi, tr = "demo/same[attention-backend=flashinfer]", "demo/same[attention-backend=triton]"
    assert main(["sweep", "demo/same", "--fixed", "-o", str(proj / "out")]) == 0
    capsys.readouterr()
    (verify,) = [r for r in Store(home / "results.sqlite").runs() if r.recipe == fi]
    said = f"{fi} is the same server as demo/same (sglang resolved both to one configuration: run {verify.run_id})"
    for order in ([fi, "demo/same"], ["demo/same", fi]):
        assert main(["compare", *order]) == 2
        out = capsys.readouterr()
        assert said in out.err and "no ok, verified results" not in out.err, out.err
        assert "no verdict" in out.err and not out.out
    launches = len(Store(home / "results.sqlite").runs())
    assert main(["compare", "--run", fi, "demo/same"]) == 2  # not launched again to be compared with itself
    assert said in capsys.readouterr().err and len(Store(home / "results.sqlite").runs()) == launches
    assert main(["compare", "demo/same", fi, tr]) == 2
    assert f"`patchbench compare demo/same {tr}`" in capsys.readouterr().err
    assert main(["compare", tr, fi]) == 2
    err = capsys.readouterr().err
    assert said in err and f"`patchbench compare {tr} demo/same`" in err, err
    assert main(["report", fi, "-o", str(proj / "rep")]) == 2
    err = capsys.readouterr().err
    assert said in err and "`patchbench report demo/same`" in err, err


def test_the_dry_run_says_which_variants_no_launch_has_shown_to_be_one_server(tmp_path, monkeypatch, home, capsys):
    """`sweep --until check` cannot launch: it says that which variants sglang resolves to one server is known
    only from a launch, and names those the store's launches already showed to be another's server (was:
    "ok" for each, "4 to measure", as if each would be measured)."""
    proj = demo_project(tmp_path, monkeypatch)
    (proj / "recipes" / "demo" / "same.toml").write_text(SAME)
    capsys.readouterr()
    assert main(["sweep", "demo/same", "--until", "check"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"ok {FI}" in text and "known only from a launch" in text, text
    assert main(["sweep", "demo/same", "--json", "--fixed", "-o", str(proj / "out")]) == 0  # FI: the default's server
    capsys.readouterr()
    assert main(["sweep", "demo/same", "--until", "check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {v["variant"]: v for v in doc["variants"]}
    assert by[FI]["same_server_as"] == "demo/same" and by["demo/same"]["same_server_as"] is None, by
    assert "known only from a launch" in doc["same_server"]  # the others: still no launch of theirs says
    assert main(["sweep", "demo/same", "--until", "check"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"same {FI}: same server as demo/same (its stored launches): not launched" in text, text
