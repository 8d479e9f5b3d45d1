"""`patchbench publish` and `results --export hud` over one store the pipeline filled on the miniature:
demo/baseline and demo/fast (2 repeats, the output check), a 2-variant sweep, and `track` over four
releases (a planted 2x decode step at 0.1.2). Every published page renders in headless Chromium
without a console message, every local link resolves; the HUD records match the columns and types
of PyTorch's benchmark.oss_ci_benchmark_v3, one per configuration, metric and point, the repeats as
values."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from conftest import REPO_ROOT, TEST_CACHE, cli_json, link_run_caches
from headless_chromium import render_pages
from toolkit.cli import main
from toolkit.results.store import Store

sys.path.insert(0, str(REPO_ROOT / "upstream"))
import mini_releases  # noqa: E402

pytestmark = pytest.mark.xdist_group("publish")  # one worker builds the module's store

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
SMALL = ('driver = "serving"\ninput_len = 16\noutput_len = 8\nconcurrency = [1]\nnum_prompts = 3\nwarmup = 1\n'
         'repeats = 2\n')
SWEEP = """extends = "demo/baseline"
compare_to = "mine/sweep"
[matrix]
server.args.mini-step-base-ms = [4, 20]
[quality]
launches = 0
"""


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A store filled through the pipeline: run, sweep and track, as a user's campaign fills it."""
    root = tmp_path_factory.mktemp("publish")
    with pytest.MonkeyPatch.context() as mp:
        home = root / "home"
        home.mkdir()
        link_run_caches(home, tmp_path_factory)
        mp.setenv("PATCHBENCH_HOME", str(home))
        proj = root / "proj"
        shutil.copytree(REPO_ROOT / "upstream" / "minisglang", proj / "upstream" / "minisglang",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        shutil.copytree(REPO_ROOT / "patches" / "demo", proj / "patches" / "demo")
        shutil.copytree(REPO_ROOT / "recipes" / "demo", proj / "recipes" / "demo",
                        ignore=shutil.ignore_patterns("*.lock.json"))
        base = proj / "recipes" / "demo" / "baseline.toml"
        head, rest = base.read_text().split("[benchmark]", 1)
        rest = rest[rest.index("\n[", 1):].replace("count = 16", "count = 4")  # 4 prompts in the output check
        base.write_text(head + "[benchmark]\n" + SMALL + rest)
        # track's releases: one point of 3 requests of 8 tokens (the demo's 6 of 16), the planted 2x step
        # as plain in the history's values
        update = proj / "recipes" / "demo" / "update.toml"
        text = update.read_text()
        assert "output_len = 16\n" in text and "num_prompts = 6\n" in text
        update.write_text(text.replace("output_len = 16\n", "output_len = 8\n").replace("num_prompts = 6\n",
                                                                                         "num_prompts = 3\n"))
        (proj / "recipes" / "mine").mkdir()
        (proj / "recipes" / "mine" / "sweep.toml").write_text(SWEEP)
        mp.setenv("PATCHBENCH_RECIPES", str(proj / "recipes"))
        releases = mini_releases.build(TEST_CACHE / "mini-releases-track4", plant="regression", at="0.1.2",
                                       n_releases=4)
        mp.setenv("PATCHBENCH_MINI_INDEX", releases["index"])
        mp.setenv("PATCHBENCH_OTAVA_ENV", str(TEST_CACHE / "otava-0.8.0"))
        assert main(["run", "demo/baseline", "demo/fast", "--fixed"]) == 0
        assert main(["sweep", "mine/sweep", "--repeats", "1", "-o", str(root / "sweep")]) == 0
        assert main(["track", "demo/update", "--source", "sglang", "--releases", "--repeats", "1"]) == 0
        yield {"root": root, "home": home, "store": home / "results.sqlite"}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: defaultdict = defaultdict(int)
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        a = dict(attrs)
        self.refs += [a[k] for k in ("href", "src", "xlink:href") if a.get(k)]
        if a.get("id"):
            self.ids.append(a["id"])


def _parse(text: str) -> Links:
    p = Links()
    p.feed(text)
    p.close()
    return p


@pytest.fixture(scope="module")
def site(filled, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    assert main(["publish", "--store", str(filled["store"]), "--home", str(filled["home"]), "-o", str(out)]) == 0
    return out


def test_every_page_renders_and_every_link_resolves(site, tmp_path):
    pages = sorted(site.rglob("*.html"))
    rel = {p.relative_to(site).as_posix() for p in pages}
    assert "index.html" in rel
    kinds = {r.split("/")[0] for r in rel}
    assert {"recipes", "compare", "history", "sweeps"} <= kinds, rel
    for page in pages:
        parsed = _parse(page.read_text())
        for ref in parsed.refs:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc, f"{page}: {ref} is not a local link"
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            assert target.is_file(), f"{page.relative_to(site)}: {ref} does not resolve"
            assert site.resolve() in target.parents, f"{page}: {ref} leaves the site"
        assert "<script" not in page.read_text().lower()

    if not CHROMIUM:
        pytest.skip("no chromium to render the pages with (apt-get install chromium); links checked")

    # one Chromium renders every page in turn (a Chromium per page cost a CPU-second each)
    rendered, browser_log = render_pages(CHROMIUM, pages, tmp_path / "profile", tmp_path / "chromium.log")
    assert len(rendered) == len(pages)
    for page, (dom, console) in zip(pages, rendered):
        assert not console, f"{page.relative_to(site)}: {console}"
        src, got = _parse(page.read_text()), _parse(dom)
        assert got.tags["h1"] == 1 and got.tags["table"] == src.tags["table"], page
        assert got.tags["svg"] == src.tags["svg"] and got.tags["img"] == src.tags["img"], page
    console = [line for line in browser_log.splitlines() if ":CONSOLE" in line]  # as Chromium logs it
    assert not console, console


def test_the_index_and_pages_say_what_the_store_holds(site, filled, capsys):
    index = (site / "index.html").read_text()
    for name in ("demo/baseline", "demo/fast", "mine/sweep", "demo/update@0.1.0"):
        assert f">{name}<" in index, name
    # demo/fast's newest verdict against its compare_to, as `compare` gives it
    row = index[index.index(">demo/fast<"):].split("</tr>", 1)[0]
    assert "demo/baseline" in row and "output_tok_s: c=1 " in row
    assert "Tracked histories" in index and "Sweeps" in index

    compare = [p for p in (site / "compare").glob("*.html") if "fast" in p.name]
    assert len(compare) == 1
    text = compare[0].read_text()
    assert "demo/fast vs demo/baseline" in text and "speedup vs demo/baseline" in text
    assert "Answers (output check)" in text  # the answers' verdicts of the output check

    (hist,) = (site / "history").glob("*.html")
    page = hist.read_text()
    assert "output_tok_s@1" in page and page.count('<img class="plot"') == 2
    for v in ("0.1.0", "0.1.1", "0.1.2", "0.1.3"):
        assert f"<td>{v}</td>" in page
    if "change points not computed" not in page:  # Otava's env made: the page says what `history` says
        rc, hist_json = cli_json(capsys, ["history", "demo/update", "--metric", "output_tok_s@1",
                                          "--store", str(filled["store"]), "--home", str(filled["home"])])
        assert rc == 0
        section = page[page.index("output_tok_s@1"):page.index("itl_ms_median@1")]
        found = re.findall(r"change point (\S+) -&gt; (\S+): ([+-][0-9.]+)%", section)
        assert found == [(c["before"], c["after"], f"{c['change_pct']:+.1f}") for c in hist_json["change_points"]]
        assert all(after == "0.1.2" for _, after, _ in found), found  # where the 2x step was planted
        if not found:  # 4 single-run points: on a loaded machine p may miss Otava's 0.001
            assert "no change points" in section

    (sweep,) = (site / "sweeps").glob("*.html")
    text = sweep.read_text()
    assert 'id="pareto-front"' in text and "mine/sweep[mini-step-base-ms=4]" in text
    assert (sweep.parent / sweep.stem / "pareto.png").stat().st_size > 1000


# benchmark.oss_ci_benchmark_v3 as pytorch/test-infra's clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql
# defines it (`_meta` is the replicator's); written out here, not imported, so the test checks the module.
MAP = "Map(String, String)"
V3 = {"timestamp": "UInt64", "schema_version": "String", "name": "String", "repo": "String",
      "head_branch": "String", "head_sha": "String", "workflow_id": "UInt64", "run_attempt": "UInt32",
      "job_id": "UInt64", "servicelab_experiment_id": "UInt64", "servicelab_trial_id": "UInt64",
      "runners": ("array", {"name": "String", "type": "String", "cpu_info": "String", "cpu_count": "UInt32",
                            "mem_info": "String", "avail_mem_in_gb": "UInt32", "gpu_info": "String",
                            "gpu_count": "UInt32", "gpu_mem_info": "String", "avail_gpu_mem_in_gb": "UInt32",
                            "extra_info": MAP}),
      "benchmark": {"name": "String", "mode": "String", "dtype": "String", "extra_info": MAP},
      "model": {"name": "String", "type": "String", "backend": "String", "origins": "Array(String)",
                "extra_info": MAP},
      "inputs": ("map", {"dtype": "String", "extra_info": MAP}),
      "dependencies": ("map", {"repo": "String", "branch": "String", "sha": "String", "version": "String",
                               "extra_info": MAP}),
      "metric": {"name": "String", "benchmark_values": "Array(Float32)", "target_value": "Float32",
                 "extra_info": MAP}}


def _check(value, kind, where: str) -> None:
    if isinstance(kind, dict):  # a Tuple: exactly its members
        assert isinstance(value, dict) and set(value) == set(kind), (where, value)
        for k, t in kind.items():
            _check(value[k], t, f"{where}.{k}")
    elif isinstance(kind, tuple):
        container, member = kind
        if container == "array":
            assert isinstance(value, list), where
            for i, v in enumerate(value):
                _check(v, member, f"{where}[{i}]")
        else:
            assert isinstance(value, dict) and all(isinstance(k, str) for k in value), where
            for k, v in value.items():
                _check(v, member, f"{where}[{k}]")
    elif kind in ("UInt64", "UInt32"):
        assert isinstance(value, int) and not isinstance(value, bool), (where, value)
        assert 0 <= value < 2 ** (64 if kind == "UInt64" else 32), (where, value)
    elif kind == "String":
        assert isinstance(value, str), (where, value)
    elif kind == "Float32":
        assert isinstance(value, float), (where, value)
    elif kind == "Array(Float32)":
        assert isinstance(value, list) and value and all(isinstance(v, float) for v in value), (where, value)
    elif kind == "Array(String)":
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), (where, value)
    elif kind == MAP:
        assert isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in value.items()), (where, value)
    else:  # pragma: no cover
        raise AssertionError(f"unknown type {kind}")


def test_hud_export_one_record_per_configuration_metric_and_point(filled, tmp_path, capsys):
    out = tmp_path / "hud.json"
    assert main(["results", "--export", "hud", "--store", str(filled["store"]), "-o", str(out)]) == 0
    recs = json.loads(out.read_text())
    assert isinstance(recs, list) and recs
    for i, r in enumerate(recs):
        assert set(r) == set(V3), set(r) ^ set(V3)
        for k, kind in V3.items():
            _check(r[k], kind, f"record {i}: {k}")
        assert r["schema_version"] == "v3" and r["timestamp"] > 1_600_000_000

    # Independently of the module: ok benchmark runs grouped by recipe, identity and group; per run the
    # mean of its samples at (metric, point); the repeats in order.
    store = Store(filled["store"])
    runs = [r for r in store.runs(status="ok") if r.kind == "benchmark"]
    by = defaultdict(dict)
    for s in store.samples([r.run_id for r in runs]):
        by[s.run_id].setdefault((s.metric, s.point), []).append(s.value)
    want = defaultdict(list)
    for r in sorted(runs, key=lambda r: r.repeat):
        for (metric, point), vals in by[r.run_id].items():
            want[(r.recipe, r.identity, r.group_id, metric, point)].append((r.run_id, sum(vals) / len(vals)))
    got = {}
    for r in recs:
        e, m = r["benchmark"]["extra_info"], r["metric"]
        key = (e["recipe"], e["identity"], e["group_id"], m["name"], int(m["extra_info"]["point"]))
        assert key not in got, f"two records for {key}"
        got[key] = (json.loads(m["extra_info"]["run_ids"]), m["benchmark_values"])
    assert set(got) == set(want)
    for key, pairs in want.items():
        assert got[key][0] == [rid for rid, _ in pairs]
        assert got[key][1] == pytest.approx([v for _, v in pairs], rel=1e-9)
    # the repeats of one configuration are one record: demo/baseline's two runs at c=1
    base = [v for k, v in got.items() if k[0] == "demo/baseline" and k[3] == "output_tok_s"]
    assert len(base) == 1 and len(base[0][1]) == 2
    assert all(r["metric"]["extra_info"]["unit"] for r in recs)
    assert not any(re.search(r"//[^/@\s]+:[^/@\s]+@", json.dumps(r)) for r in recs)  # no credentials in URLs


def test_bad_input_is_one_line_and_exit_2(filled, tmp_path, capsys):
    empty = tmp_path / "empty.sqlite"
    Store(empty).close()
    capsys.readouterr()
    assert main(["publish", "--store", str(empty), "-o", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: nothing to publish") and len(err.splitlines()) == 1

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["publish", "--store", str(filled["store"]), "--home", str(filled["home"]),
                 "-o", str(blocker / "site")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot write the site to") and len(err.splitlines()) == 1


def test_an_export_imported_into_another_store_publishes_and_tracks_with_imported(filled, tmp_path, capsys):
    """A store filled from another's export (`results --export json` then `import`): its runs are
    marked imported, so history says so per point instead of "failed", and `--imported` counts them
    (history's series equals the original's; publish compares again)."""
    common = ["--home", str(filled["home"])]
    export, copy = tmp_path / "all.json", tmp_path / "copy.sqlite"
    assert main(["results", "--export", "json", "--limit", "1000", "--store", str(filled["store"]), "-o",
                 str(export), *common]) == 0
    assert main(["import", str(export), "--store", str(copy), *common]) == 0
    capsys.readouterr()
    hist = ["history", "demo/update", "--metric", "output_tok_s@1", *common]
    rc, original = cli_json(capsys, [*hist, "--store", str(filled["store"])])
    rc2, plain = cli_json(capsys, [*hist, "--store", str(copy)])
    rc3, counted = cli_json(capsys, [*hist, "--store", str(copy), "--imported"])
    assert rc == rc3 == 0
    assert {p["status"] for p in plain["series"]} == {"imported"}, plain["series"]
    assert [p["values"] for p in counted["series"]] == [p["values"] for p in original["series"]]
    site = tmp_path / "site"
    assert main(["publish", "--store", str(copy), "-o", str(site), "--imported", *common]) == 0
    compare = [p for p in (site / "compare").glob("*.html") if "fast" in p.name]
    assert len(compare) == 1 and "demo/fast vs demo/baseline" in compare[0].read_text()
