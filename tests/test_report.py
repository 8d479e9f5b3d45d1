"""report: Markdown table with PNG plots beside it, and a self-contained HTML page (inline SVG,
matplotlib) from a results store; runs chosen as compare chooses them."""

from __future__ import annotations

import random
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from toolkit.run.bench import Sample
from toolkit.cli import main
from toolkit.analysis.efficiency import Efficiency, efficiency
from toolkit.analysis.selection import Criteria
from toolkit.errors import BadInput
from toolkit.report.document import collect, render_markdown
from toolkit.report.plots import Series, bar_plot, line_plot, svg
from toolkit.results.store import Store

PARAMS = {"input_len": 128, "output_len": 256, "points": [1, 2, 4, 8], "num_prompts": 64, "seed": 1}
POINTS = (1, 2, 4, 8)
ROOFLINE = {"model": "llama-3.1-8b", "gpu": "h200", "weights": "all=bf16"}
RECIPES = {  # name -> (throughput factor, latency factor, patches)
    "base": (1.0, 1.0, {}),
    "fast": (1.25, 0.8, {"sglang": ["patches/0001-faster-decode.patch"]}),
    "same": (1.0, 1.0, {"flashinfer": ["patches/0001-noop.patch"]}),
}


def fill(store: Store, recipes=RECIPES, repeats: int = 4, seed: int = 3, roofline=ROOFLINE) -> None:
    rng = random.Random(seed)
    for rep in range(repeats):
        for name, (tf, lf, patches) in recipes.items():
            samples = []
            for p in POINTS:
                samples.append(Sample("output_tok_s", rng.gauss(100 * p * tf, 1.0 * p), "tok/s", p, "concurrency"))
                samples.append(Sample("itl_ms_median", rng.gauss(10 * (1 + p / 8) * lf, 0.1), "ms", p, "concurrency"))
            store.record_run(dict(
                recipe=name, config_verified=True, bench_driver="serving", bench_params=PARAMS,
                machine={"gpu_key": "none"}, repeat=rep, sglang_version="0.5.10",
                flashinfer_version="0.4.1", tree_hashes={"sglang": f"{name:0<8}deadbeefcafe"},
                server_argv=["python", "-m", "sglang.launch_server"] + (["--enable-fast"] if name == "fast" else []),
                extra={"patches": patches}, server_info={"tp_size": 1, "ep_size": 1, "dp_size": 1, "pp_size": 1},
                recipe_resolved={"name": name, "server": {"args": {"tp-size": 1}}, "roofline": roofline}),
                samples)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "results.sqlite"
    s = Store(path)
    fill(s)
    s.close()
    return path


class Page(HTMLParser):
    """Records the structure the checks need: svgs, their titles, series elements, references."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.svgs: list[dict] = []
        self.refs: list[str] = []
        self.tables = 0
        self.ths: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href", "xlink:href", "action"):
            if a.get(k):
                self.refs.append(a[k])
        if tag == "svg":
            self.svgs.append({"title": None, "series": [], "text": []})
        elif self.svgs and "svg" in self.stack:
            gid = a.get("id") or ""
            if gid.startswith("series-"):  # "series-line NAME" / "series-bar-K NAME"
                kind, name = gid.split(" ", 1)
                self.svgs[-1]["series"].append(("line" if kind == "series-line" else "bar", name))
        if tag == "table":
            self.tables += 1
        self._in_th = tag == "th"
        self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop() == tag:
                break
        self._in_th = False

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "title" and len(self.stack) >= 2 and self.stack[-2] == "svg":
            if self.svgs[-1]["title"] is None:
                self.svgs[-1]["title"] = data.strip()
        if self._in_th:
            self.ths.append(data)
        if self.svgs and "svg" in self.stack and self.stack[-1] == "text":
            self.svgs[-1]["text"].append(data.strip())


def test_report_cli_writes_markdown_and_html(db, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["report", "base", "fast", "same", "--store", str(db), "-o", str(out), "--title", "decode PR"])
    assert rc == 0
    md, page = out / "report.md", out / "report.html"
    printed = capsys.readouterr().out
    assert str(md) in printed and str(page) in printed

    text = md.read_text()
    lines = text.splitlines()
    table_heads = [l for l in lines if l.startswith("| ") and "speedup vs base" in l]
    assert table_heads, text
    head_i = lines.index(table_heads[0])
    assert lines[head_i + 1].startswith("|---")
    body = [l for l in lines[head_i + 2:] if l.startswith("|")]
    for name in RECIPES:
        assert any(f"| {name} |" in l for l in body)
    fast_rows = [l for l in body if "| fast |" in l]
    assert any("faster" in l and "x [" in l for l in fast_rows)  # speedup with its interval and verdict
    assert any("| baseline |" in l for l in body)
    assert "± " in text and "c=8" in text
    assert "decode PR" in text
    assert "sglang 0.5.10" in text and "0001-faster-decode.patch" in text
    assert "What else differed" in text and "server flag added: --enable-fast" in text
    assert "Efficiency vs roofline" in text and "llama-3.1-8b" in text

    html_text = page.read_text()
    p = Page()
    p.feed(html_text)
    p.close()
    assert len(p.svgs) >= 3
    for one in p.svgs:
        assert one["title"], one
        assert one["text"]  # axis labels and legend stay text
    all_series = {name for one in p.svgs for _, name in one["series"]}
    assert set(RECIPES) <= all_series
    line_svgs = [one for one in p.svgs if any(t == "line" for t, _ in one["series"])]
    assert len(line_svgs) >= 2
    for one in line_svgs:
        assert {n for t, n in one["series"] if t == "line"} == set(RECIPES)
        assert any("(log2 scale)" in x for x in one["text"])
    speed = [one for one in p.svgs if one["title"].startswith("speedup")]
    assert speed and {n for _, n in speed[0]["series"]} == {"fast", "same"}
    assert any(one["title"].startswith("efficiency") for one in p.svgs)
    assert p.tables >= 2 and any("speedup vs base" in t for t in p.ths)
    assert not [r for r in p.refs if r.lower().startswith(("http:", "https:", "//"))]
    assert "<script" not in html_text.lower()


CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")


def _chromium(*args: str, profile: Path) -> str:
    """Headless Chromium with a profile of its own (parallel tests each start one); its stdout."""
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                           *args], check=True, capture_output=True, text=True, timeout=120).stdout


@pytest.mark.skipif(not CHROMIUM, reason="no chromium to render the page with (apt-get install chromium)")
def test_report_html_renders_in_chromium(db, tmp_path):
    out = tmp_path / "out"
    assert main(["report", "base", "fast", "--store", str(db), "-o", str(out)]) == 0
    page = out / "report.html"
    # The DOM the browser built from the page: every inline SVG parsed, with its title and series.
    source, rendered = Page(), Page()
    source.feed(page.read_text())
    rendered.feed(_chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile"))
    assert rendered.svgs and [(s["title"], s["series"]) for s in rendered.svgs] == \
        [(s["title"], s["series"]) for s in source.svgs]
    assert rendered.tables == source.tables >= 2
    # ... and painted: the screenshot has the plots' coloured lines and bars, not a blank page.
    import matplotlib.image

    png = tmp_path / "shot.png"
    _chromium(f"--screenshot={png}", "--window-size=1200,2400", page.as_uri(), profile=tmp_path / "profile")
    rgb = matplotlib.image.imread(png)[..., :3]
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3  # saturated pixels: series colours, not text
    assert rgb.shape[:2] == (2400, 1200) and coloured.sum() > 1000


def test_single_recipe_has_no_comparisons(db, tmp_path):
    out = tmp_path / "one"
    assert main(["report", "base", "--store", str(db), "-o", str(out), "--metric", "output_tok_s"]) == 0
    text = (out / "report.md").read_text()
    assert "| base |" in text and "itl_ms_median" not in text and "What else differed" not in text
    p = Page()
    p.feed((out / "report.html").read_text())
    assert p.svgs and all(one["title"] for one in p.svgs)


def test_no_results_is_one_line_bad_input(db, tmp_path, capsys):
    rc = main(["report", "base", "missing", "--store", str(db), "-o", str(tmp_path / "x")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "missing" in err and "\n" not in err
    assert not (tmp_path / "x").exists()
    rc = main(["report", "base", "--store", str(db), "-o", str(tmp_path / "x"), "--metric", "nope"])
    assert rc == 2


def test_collect_without_roofline_and_unverified(tmp_path):
    s = Store(tmp_path / "r.sqlite")
    fill(s, {"a": RECIPES["base"], "b": RECIPES["fast"]}, roofline={})
    s.record_run(dict(recipe="c", config_verified=False, bench_driver="serving", bench_params=PARAMS,
                      machine={"gpu_key": "none"}),
                 [Sample("output_tok_s", 90.0, "tok/s", 1, "concurrency")])
    with pytest.raises(BadInput, match="c: configuration not verified .use --unverified"):
        collect(s, ["a", "b", "c"])  # the same rule as compare: unverified runs only on request
    data = collect(s, ["a", "b", "c"], criteria=Criteria(unverified=True))
    assert all(r.efficiency is None for r in data.recipes)
    md = render_markdown(data)
    assert "| c |" in md and "unverified" in md
    assert {r.recipe for r in data.rows} == {"b", "c"}
    data2 = collect(s, ["a", "b"])
    assert data2.rows and {r.recipe for r in data2.rows} == {"b"}
    s.close()


def test_efficiency_shared_with_results(tmp_path):
    s = Store(tmp_path / "r.sqlite")
    fill(s, {"a": RECIPES["base"]}, repeats=1)
    run = s.runs()[0]
    eff = efficiency(run, s.samples([run.run_id]))
    # decode-only: the fill stores no TPOT, so 1000 / median ITL at c=1 (serving output_tok_s shown beside)
    assert isinstance(eff, Efficiency) and eff.metric == "itl_ms_median" and 0 < eff.fraction < 1
    assert "1000/median ITL at c=1" in eff.text() and "serving" in eff.text()
    from toolkit.commands.results import _efficiency

    assert _efficiency(run, s.samples([run.run_id])) == eff.text()
    s.close()


def test_plotters_handle_edges():
    one = svg(line_plot("t", "x", "y", [Series("a", "#000", ((4, 1.0, None, None),))]), "one point")
    assert one.startswith("<svg") and one.count("<title>") == 1 and "nan" not in one
    empty = svg(bar_plot("t", "x", "y", [], [], ref=1.0))
    assert empty.startswith("<svg") and empty.rstrip().endswith("</svg>")
    nan = svg(bar_plot("t", "x", "y", ["c=1"], [Series("a", "#000", ((0, float("nan"), None, None),))]))
    assert "series-bar" not in nan  # a missing value draws no bar


def test_report_writes_png_plots_referenced_from_markdown(db, tmp_path):
    out = tmp_path / "pr"
    assert main(["report", "base", "fast", "--store", str(db), "-o", str(out)]) == 0
    text = (out / "report.md").read_text()
    import re

    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert {"throughput.png", "latency.png"} <= set(images)
    for name in images:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert "verdict: faster/slower needs" in text and "1% (--min-effect)" in text
    assert "**Runs used:**" in text and "base: 4 run(s)" in text


def test_speedup_bars_are_coloured_by_verdict_not_by_recipe(db):
    """Faster is always the 'better' colour, slower the 'worse' one, whatever the recipe's colour."""
    from matplotlib.colors import to_hex

    from toolkit.report.plots import BETTER, PALETTE, UNDECIDED, WORSE, plots

    store = Store(db)
    data = collect(store, ["base", "fast", "same"], ["output_tok_s", "itl_ms_median"])
    assert BETTER not in PALETTE and WORSE not in PALETTE
    for plot in (p for p in plots(data) if p.name.startswith("speedup-")):
        ax = plot.figure.axes[0]
        fast = [b for b in ax.patches if "fast" in (b.get_gid() or "")]
        same = [b for b in ax.patches if "same" in (b.get_gid() or "")]
        assert fast and all(to_hex(b.get_facecolor()) == BETTER for b in fast), plot.name
        assert same and all(to_hex(b.get_facecolor()) in (UNDECIDED, BETTER, WORSE) for b in same)
        assert all(to_hex(b.get_facecolor()) != BETTER for b in same
                   if data.compare_row("same", plot.name.removeprefix("speedup-"), 1).verdict != "faster")


def test_the_html_colours_a_verdict_whatever_its_qualifier_says_about_the_rule():
    from toolkit.report.document import verdict_class

    assert verdict_class(["x", "faster (sequential)"]) == "faster"
    assert verdict_class(["x", "faster, not informative"]) == "faster"
    assert verdict_class(["x", "slower (sequential)"]) == "slower"
    assert verdict_class(["x", "faster, answers changed"]) is None  # a gain with other answers is not green
    assert verdict_class(["x", "not significant"]) is None and verdict_class(["x", ""]) is None
