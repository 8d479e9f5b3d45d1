"""The profile path on a real CUDA GPU (torch's CUDA activities): runs benchmarks/profile_gpu.py.
Marked `gpu`: skipped where torch or a CUDA device is missing (CI has neither)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.gpu
def test_profile_on_a_cuda_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_gpu.py"), "--steps", "20",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout
