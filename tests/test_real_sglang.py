"""The pipeline against real sglang 0.5.23 (PyPI) serving on this CPU: recipes/cpu/baseline and
recipes/cpu/oea on patchbench's tiny GLM-4-MoE. Slow: the env (~2 GB, uv-cached), and 4 server
launches of 1-4 min each on 2 shared cores, then a server of tests/sglang_server.py.

What it shows, from the real server: the static check passes with sglang's own parser for
--device cpu; launch, /server_info verification, the serving benchmark and the answers check run;
OEA's evidence comes from the live server (fewer distinct experts than plain routing would pick
at concurrency 8); the sgl_kernel stand-in was never called; compare gives a speed and an
answers verdict.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from sglang_server import SHARED_HOME, real_sglang, real_sglang_url  # noqa: F401 (fixtures)
from toolkit.cli import main
from toolkit.results.store import Store
from toolkit.run.evidence import standin_calls

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def test_baseline_and_oea_on_real_sglang(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    common = ["--home", str(SHARED_HOME), "--store", str(store)]
    assert main(["run", "cpu/baseline", "cpu/oea", *common]) == 0, capsys.readouterr().err
    runs = Store(store).runs()
    assert {r.recipe for r in runs} == {"cpu/baseline", "cpu/oea"}
    assert all(r.status == "ok" for r in runs), [(r.recipe, r.status, r.error) for r in runs]
    for r in runs:
        log = (SHARED_HOME / "runs" / r.run_id / "server.log").read_text(errors="replace")
        assert standin_calls(log) == []  # the real tier reached no stand-in name
        assert "OEA active" in log if r.recipe == "cpu/oea" else "OEA active" not in log
    for r in (r for r in runs if r.recipe == "cpu/oea"):
        assert r.extra["evidence"] == {"sglang/oea-topk.patch": "ok"}
        m = r.extra["evidence_metrics"]
        assert m["oea_tokens"] >= 2 and m["distinct_experts"] < m["experts_before"]
    capsys.readouterr()
    assert main(["compare", "cpu/baseline", "cpu/oea", "--json", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out, "compare printed nothing"


def test_the_real_server_fixture_serves_greedy_answers_that_repeat(real_sglang_url):
    body = json.dumps({"text": "What is 17 + 25?",
                       "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()

    def ask():
        req = urllib.request.Request(real_sglang_url + "/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    a, b = ask(), ask()
    assert a["meta_info"]["completion_tokens"] == 8
    assert a["output_ids"] == b["output_ids"]
    with urllib.request.urlopen(real_sglang_url + "/server_info", timeout=60) as r:
        info = json.loads(r.read())
    assert info["version"] == "0.5.23" and info["device"] == "cpu"
