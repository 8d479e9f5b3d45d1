"""The flashinfer-python 0.7.2 sdist and the CUDA tools the slow patch tests compile with.

The sdist comes from PyPI (cached under $PATCHBENCH_TEST_CACHE or ~/.cache/patchbench-test,
downloaded once for concurrent test processes); a test unpacks the subset it compiles from. nvcc
is the machine's (CUDA_HOME, /usr/local/cuda or PATH); headers a minimal toolkit lacks (cuRAND,
cuBLASLt) and cuobjdump come from NVIDIA's PyPI wheels, extracted once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from conftest import TEST_CACHE, pypi_download
from toolkit.build_once import build_once
from toolkit.digest import sha256_file

SDIST_NAME = "flashinfer_python-0.7.2.tar.gz"
SDIST_REQ = "flashinfer-python==0.7.2"
SDIST_SHA256 = "31646a6c1a9a5268056ddd31f377fbb57adf0f68ba6c7714a3a3f348bd1d1454"
# What the dense GEMM compile needs from the 54 MB sdist (its csrc/ subdirectories alone are 250 MB).
SDIST_KEEP = ("flashinfer/jit/", "include/", "3rdparty/cutlass/include/",
              "3rdparty/cutlass/tools/util/include/", "3rdparty/cccl/", "3rdparty/spdlog/include/")


@pytest.fixture(scope="session")
def flashinfer_sdist() -> Path:
    """The sdist, downloaded once however many test processes ask (conftest.pypi_download)."""
    path = pypi_download(["--no-binary", "flashinfer-python", SDIST_REQ], SDIST_NAME)
    assert sha256_file(path) == SDIST_SHA256, f"{path} is not the flashinfer-python 0.7.2 sdist"
    return path


def unpack_subset(sdist: Path, dest: Path, keep: tuple[str, ...] = SDIST_KEEP) -> None:
    """The sdist's top-level files, csrc/'s top-level files and everything under `keep`."""
    with tarfile.open(sdist) as tf:
        for member in tf.getmembers():
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts[1:]
            if not parts or ".." in parts:
                continue
            rel = "/".join(parts)
            top_csrc = len(parts) == 2 and parts[0] == "csrc"
            if not (rel.startswith(keep) or top_csrc or len(parts) == 1):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with tf.extractfile(member) as src, open(target, "wb") as fh:
                shutil.copyfileobj(src, fh)


def find_nvcc() -> Path | None:
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / "nvcc").is_file():
            return Path(base) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    return Path(found) if found else None


def cuda_version(nvcc: Path) -> tuple[int, int]:
    """(major, minor) from `nvcc --version` ('... release 13.0, V13.0.88')."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    if "release " not in out:
        return (0, 0)
    major, minor = out.split("release ", 1)[1].split(",", 1)[0].strip().split(".")[:2]
    return int(major), int(minor)


def from_wheel(requirement: str, marker: str) -> Path:
    """This platform's wheel of `requirement`, downloaded once; the directory holding its member
    that ends in `marker` extracted (all of it: headers include their siblings) once for concurrent
    test processes (toolkit.build_once); that member's path."""
    name = requirement.split("=")[0].split("<")[0].split(">")[0].replace("-", "_")
    wheel = pypi_download(["--only-binary=:all:", requirement], f"{name}-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        hits = sorted(n for n in zf.namelist() if n.endswith(marker))
        if not hits:
            pytest.skip(f"{wheel.name} has no member ending in {marker}")
        prefix = hits[0].rsplit("/", 1)[0] + "/"

        def extract(tmp: Path) -> None:
            for info in zf.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    zf.extract(info, tmp)
                    if (info.external_attr >> 16) & 0o111:
                        (tmp / info.filename).chmod(0o755)

        dest = build_once(TEST_CACHE / "extracted" / f"{wheel.stem}-{hashlib.sha256(prefix.encode()).hexdigest()[:8]}",
                          extract, complete=lambda d: (d / hits[0]).is_file())
    return dest / hits[0]


@pytest.fixture(scope="session")
def cuda_tools():
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME): cannot compile the CUTLASS instantiation")
    version = cuda_version(nvcc)
    if version < (12, 8):
        pytest.skip(f"sm_120a needs CUDA >= 12.8 (nvcc {nvcc} is {version[0]}.{version[1]})")
    major = version[0]
    extra: list[str] = []
    # CUTLASS's tools/util headers include curand_kernel.h; a minimal toolkit may lack cuRAND.
    if not (nvcc.parent.parent / "include" / "curand_kernel.h").is_file():
        req = "nvidia-curand==10.4.*" if major >= 13 else "nvidia-curand-cu12"
        inc = from_wheel(req, "/include/curand_kernel.h").parent
        extra = ["-isystem", str(inc)]
    cuobjdump = nvcc.parent / "cuobjdump"
    if not cuobjdump.is_file():
        req = "nvidia-cuda-cuobjdump" if major >= 13 else "nvidia-cuda-cuobjdump-cu12"
        cuobjdump = from_wheel(req, "/bin/cuobjdump")
        cuobjdump.chmod(0o755)
    return nvcc, cuobjdump, extra


def list_elf_arches(cuobjdump_output: str) -> set[str]:
    """`cuobjdump --list-elf` lines look like 'ELF file    1: name.1.sm_120a.cubin'."""
    arches = set()
    for line in cuobjdump_output.splitlines():
        name = line.split(":", 1)[-1].strip()
        for part in name.split("."):
            if part.startswith("sm_"):
                arches.add(part)
    return arches




@pytest.fixture(scope="session")
def cublaslt_include(cuda_tools) -> list[str]:
    """-isystem for cublasLt.h (TensorRT-LLM's cudaUtils.h includes it): the toolkit's, else the
    nvidia-cublas wheel's of the same CUDA major."""
    nvcc = cuda_tools[0]
    if (nvcc.parent.parent / "include" / "cublasLt.h").is_file():
        return []
    req = "nvidia-cublas==13.*" if cuda_version(nvcc)[0] >= 13 else "nvidia-cublas-cu12"
    return ["-isystem", str(from_wheel(req, "/include/cublasLt.h").parent)]


def described_files(patch: Path) -> set[str]:
    """The files a shipped FlashInfer patch changes, read by patchbench's own parser, after checking it
    says what it does: a Subject line and a description of more than 200 characters before the diff."""
    from toolkit.tree.patches import parse_patch

    head = patch.read_text().split("diff --git", 1)[0]
    assert head.startswith("Subject: ") and len(head.split("\n\n", 1)[1].strip()) > 200, head[:300]
    return {f.path for f in parse_patch(patch).files}
