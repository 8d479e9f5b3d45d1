"""The CPU stand-in for sgl_kernel provides the names real sglang imports, raises when one is called,
and a run whose server called one is not a valid run."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT
from toolkit.run import evidence

STANDIN = REPO_ROOT / "upstream" / "sgl-kernel-standin" / "src"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(STANDIN), "PATH": "/usr/bin:/bin"})


def test_every_name_imports_and_raises_with_its_marker_in_the_log():
    out = _python("from sgl_kernel import NAMES\n"
                  "import sgl_kernel\n"
                  "for n in NAMES:\n"
                  "    try:\n"
                  "        getattr(sgl_kernel, n)(1, x=2)\n"
                  "    except NotImplementedError:\n"
                  "        print('raised', n)\n")
    assert out.returncode == 0, out.stderr
    raised = [ln.split()[1] for ln in out.stdout.splitlines()]
    assert "assign_req_to_token_pool_cpu" in raised and len(raised) >= 8
    assert evidence.standin_calls(out.stderr) == raised


def test_a_server_log_with_a_standin_call_fails_the_evidence_and_a_clean_one_passes():
    log = "[2026-12-01] Prefill batch\npatchbench sgl_kernel stand-in called: copy_all_layer_kv_cache_cpu\n"
    verdict = evidence.check_evidence([], {}, log, None)
    assert not verdict.ok and "copy_all_layer_kv_cache_cpu" in verdict.problems[0]
    assert evidence.check_evidence([], {}, "[2026-12-01] Prefill batch\n", None).ok


def test_an_unknown_name_is_an_import_error_not_a_silent_stand_in():
    out = _python("from sgl_kernel import fused_experts")
    assert out.returncode != 0 and "ImportError" in out.stderr
