"""The numbers a report and a published page show are the ones `compare` judged: a pair launched until
settled is judged at its look (the first n launches of each side), however many runs are stored since;
the cost of launches that held no GPU is their time, never "0.00 GPU-min"; a point the answers were not
checked at says so everywhere."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from conftest import link_run_caches
from toolkit.cli import main

# one worker builds the module's campaign (under --dist loadgroup its tests would otherwise go to
# several workers, each launching the whole campaign again: ~7 CPU-s each)
pytestmark = pytest.mark.xdist_group("report-numbers")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """demo/baseline and demo/quick (3x) launched until settled, then one more launch of demo/baseline on
    its own: the baseline has one run more than the pair's look judged. Points 1, 2, 4: the answers are
    checked at 1 and 4. (project root, home, what the
    first run printed)"""
    from test_sequential import quick_pair

    tmp = tmp_path_factory.mktemp("report-numbers")
    with pytest.MonkeyPatch.context() as mp:
        home = tmp / "home"
        home.mkdir()
        link_run_caches(home, tmp_path_factory)
        mp.setenv("PATCHBENCH_HOME", str(home))
        root = quick_pair(tmp, mp)
        base = root / "recipes" / "demo" / "baseline.toml"  # a middle point, where the answers are not asked
        base.write_text(base.read_text().replace("concurrency = [1, 4]", "concurrency = [1, 2, 4]"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["run", "demo/baseline", "demo/quick"]) == 0
        assert main(["run", "demo/baseline", "--fixed", "--repeats", "1"]) == 0
        yield root, home, " ".join(printed.getvalue().split())


def _compare_rows(capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["compare", "demo/baseline", "demo/quick", "--metric", "output_tok_s", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["rows"]


def _report_lines(tmp_path, capsys) -> list[str]:
    assert main(["report", "demo/baseline", "demo/quick", "--metric", "output_tok_s", "-o", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    return (tmp_path / "rep" / "report.md").read_text().splitlines()


def test_report_rows_show_the_launches_the_verdict_judged(measured, tmp_path, capsys):
    from toolkit.analysis.stats import format_mean_std

    rows = _compare_rows(capsys)
    md = _report_lines(tmp_path, capsys)
    stored = 1 + max(r["n_base"] for r in rows)
    for r in rows:
        assert r["n_base"] < stored  # the look judged fewer baseline launches than are stored
        (line,) = [x for x in md if f"| demo/quick | {format_mean_std(r['variant_mean'], r['variant_std'], 'tok/s')}"
                   .replace(" +- ", " ± ") in x and f"{r['speedup']:.3f}x" in x]
        judged = format_mean_std(r["base_mean"], r["base_std"], "tok/s").replace(" +- ", " ± ")
        # the variant's n is the look's ("2", or "2 of 3" where a later point took a third launch)
        assert f"| {r['n_variant']} |" in line or f"| {r['n_variant']} of " in line, line
        assert f"vs demo/baseline over {r['n_base']} of its {stored} runs: {judged}" in line, line


def test_launches_without_a_gpu_are_costed_in_minutes_not_gpu_minutes(measured, tmp_path, capsys):
    """The demo recipes hold no GPU (`[server] gpus = 0`): run's cost line and the report's section give
    their time and say no GPU was held, without a GPU-minutes heading or figure."""
    printed = measured[2]
    (cost,) = [c for c in printed.split("cost: ")[1:2]]
    assert "GPU-min" not in cost and "no GPU held" in cost, cost
    md = _report_lines(tmp_path, capsys)
    assert "### Cost (launch time; no GPU held)" in md and not [x for x in md if "GPU minutes" in x or "GPU-min" in x], md
    capsys.readouterr()
    assert main(["run", "demo/baseline", "demo/quick"]) == 0  # settled from the store: nothing launched
    again = " ".join(capsys.readouterr().out.split())
    assert "cost: nothing launched" in again and "GPU-min" not in again, again


def test_a_recipe_alone_shows_no_verdict_rule_it_did_not_apply(measured, tmp_path, capsys):
    """`report RECIPE` of one recipe, and its page of `publish`: its values, without a speedup column, a
    "baseline" or the fixed rule's legend (Mann-Whitney, --min-effect 1%: no verdict was drawn there);
    the pair's own page keeps its rule."""
    assert main(["report", "demo/baseline", "--metric", "output_tok_s", "-o", str(tmp_path / "one")]) == 0
    md = (tmp_path / "one" / "report.md").read_text()
    assert "| demo/baseline |" in md and "speedup" not in md.lower() and "Mann-Whitney" not in md, md
    assert main(["publish", "-o", str(tmp_path / "site")]) == 0
    capsys.readouterr()
    (page,) = (tmp_path / "site" / "recipes").glob("demo_baseline*.html")
    alone = page.read_text()
    assert "Mann-Whitney" not in alone and "speedup vs" not in alone and "; baseline demo/baseline" not in alone
    (pair,) = (tmp_path / "site" / "compare").glob("*demo_quick*.html")
    assert "speedup vs demo/baseline" in pair.read_text() and "; baseline demo/baseline" in pair.read_text()


def test_a_point_without_an_answers_check_says_so_in_report_and_site(measured, tmp_path, capsys):
    """The answers are asked at c=1 and c=4 only: compare's c=2 row reads "faster, answers not checked at
    this point", and so do the report's row and the site's index, never a plain "faster"."""
    assert main(["compare", "demo/baseline", "demo/quick", "--metric", "output_tok_s"]) == 0
    assert "answers not checked at this point" in " ".join(capsys.readouterr().out.split())
    md = _report_lines(tmp_path, capsys)
    (row,) = [x for x in md if "| demo/quick |" in x and "| c=2 |" in md[md.index(x) - 1]]
    assert row.endswith(" (sequential), answers not checked at this point |"), row  # faster, on a quiet box
    assert main(["publish", "-o", str(tmp_path / "site")]) == 0
    capsys.readouterr()
    index = (tmp_path / "site" / "index.html").read_text()
    assert re.search(r"c=2 [a-z ]+, answers not checked at this point \(", index), index


def test_intervals_of_sequential_rows_are_not_called_95_percent_cis(measured, tmp_path, capsys):
    """Every row of the pair is the sequential verdict's (a confidence sequence at its look, or TOST bounds):
    the report's column and speedup plot say "interval", as compare's header does, not "95% CI"."""
    lines = _report_lines(tmp_path, capsys)
    (head,) = [x for x in lines if x.startswith("| metric |")]
    assert "| speedup vs demo/baseline [interval] |" in head, head
    (plot,) = [x for x in lines if x.startswith("![speedup of output_tok_s")]
    assert "(interval; green faster" in plot and "95% CI" not in plot, plot
