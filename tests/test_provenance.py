"""Whole-env provenance: every differing distribution, toolchain, arch, resolved config, by impact."""

from __future__ import annotations

from toolkit.run.bench import Sample
from toolkit.cli import main
from toolkit.analysis.provenance import env_differences, package_changes, parse_freeze
from toolkit.envs.manifest import env_record
from toolkit.results.store import Store

FREEZE_A = ["sglang==0.5.10.post1", "sgl-kernel==0.4.1", "flashinfer-python==0.6.7.post3", "torch==2.9.1",
            "transformers==5.3.0", "Jinja2==3.1.6", "numpy==2.2.0", "triton==3.5.0"]
FREEZE_B = ["sglang==0.5.23", "sglang-kernel==0.4.10", "flashinfer-python==0.7.2", "flashinfer_cubin==0.7.2",
            "torch==2.14.1", "transformers==5.19.0", "jinja2==3.1.6", "numpy==2.2.1", "triton==3.5.0"]


def manifest(packages, nvcc="12.9", arch=("12.0a",)):
    return {"packages": packages, "toolchain": {"nvcc_version": nvcc, "cuda_home": "/usr/local/cuda"},
            "arch": list(arch)}


def test_parse_freeze_normalises_names_and_reads_urls():
    got = parse_freeze(["Flash_Infer.Python==1.0", "foo @ file:///x/foo-1.0.whl", "-e /src", ""])
    assert got == {"flash-infer-python": "1.0", "foo": "file:///x/foo-1.0.whl"}


def test_every_differing_distribution_in_impact_order():
    names = [n for n, _, _ in package_changes(FREEZE_A, FREEZE_B)]
    assert names == ["sglang", "sglang-kernel", "sgl-kernel", "flashinfer-cubin", "flashinfer-python", "torch",
                     "transformers", "numpy"]  # jinja2 and triton are equal; case/underscores do not matter


def test_env_differences_lists_packages_toolchain_arch_and_resolved_config():
    a = env_record(manifest(FREEZE_A), {"attention_backend": "flashinfer", "port": 1})
    b = env_record(manifest(FREEZE_B, nvcc="13.0", arch=("12.0f",)), {"attention_backend": "dsa", "port": 2})
    lines = env_differences(a, b, resolved_keys=("attention_backend",))
    assert lines[0] == "package sglang: 0.5.10.post1 -> 0.5.23"
    assert "package torch: 2.9.1 -> 2.14.1" in lines
    assert "package sgl-kernel: 0.4.1 -> (absent)" in lines
    assert "CUDA toolchain nvcc_version: 12.9 -> 13.0" in lines
    assert "build arch: 12.0a -> 12.0f" in lines
    assert "resolved attention_backend: flashinfer -> dsa" in lines
    assert not any("port" in line for line in lines)
    assert env_differences(a, a, resolved_keys=("attention_backend",)) == []


def test_compare_shows_the_torch_versions(tmp_path, capsys):
    db = tmp_path / "results.sqlite"
    store = Store(db)
    params = {"input_len": 128, "output_len": 128, "points": [1], "num_prompts": 8, "seed": 0}
    same = [p for p in FREEZE_A if not p.startswith("torch")]
    for recipe, torch_version in (("old-torch", "2.9.1"), ("new-torch", "2.14.1")):
        for rep, tok_s in enumerate((100.0, 101.0, 99.0)):
            store.record_run(dict(recipe=recipe, status="ok", bench_driver="serving", bench_params=params,
                                  machine={}, config_verified=True, repeat=rep,
                                  extra={"env": env_record(manifest([*same, f"torch=={torch_version}"]))}),
                             [Sample("output_tok_s", tok_s, "tok/s", 1, "concurrency")])
    store.close()
    assert main(["compare", "old-torch", "new-torch", "--store", str(db), "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "package torch: 2.9.1 -> 2.14.1" in out
