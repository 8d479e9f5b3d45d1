"""The recipe's values (pure: imports no effect module).

`SourceSpec`, `BuildSpec`, `ServerSpec`, `BenchSpec` and `TargetSpec` are what `toolkit.recipe.load` builds from a
recipe's tables and what the effect modules (sources, envs, build, server, bench) consume.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


def jsonable(obj: Any) -> Any:
    """Tuples to lists, paths to strings, mapping keys to strings (for JSON and hashing)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def canonical_json(obj: Any) -> str:
    return json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class SourceSpec:
    """Where one upstream comes from."""

    name: str
    kind: str  # "git" | "path" | "pypi"
    location: str  # URL or path (git/path: absolute once resolved) or requirement (pypi)
    rev: str | None = None
    package_dir: str = ""
    artifact: str = "auto"
    sha256: str | None = None
    index: str | None = None  # pypi only: the package index (URL or local dir); default $PATCHBENCH_PYPI_INDEX

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass(frozen=True)
class ServerSpec:
    model: str | None = None
    args: tuple[tuple[str, Any], ...] = ()  # flag (without --) -> value, in declaration order
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 600.0
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    gpus: int | None = None


@dataclass(frozen=True)
class BenchSpec:
    driver: str = "serving"
    input_len: int = 128
    output_len: int = 128
    concurrency: tuple[int, ...] = tuple(2**i for i in range(11))  # 1 .. 1024
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    num_prompts: int | None = None
    warmup: int = 2
    seed: int = 0
    repeats: int = 3
    endpoint: str = "generate"
    timeout_s: float = 1800.0
    strict_box: bool = False  # a run whose GPUs throttled / were shared is invalid (toolkit.run.gpustate)
    min_effect: float = 0.02  # the indifference zone of `run`'s sequential verdicts (toolkit.analysis.sequential)
    # the sequential looks pool the spread of this configuration's stored launches (toolkit.analysis.noise_prior):
    # fewer launches, valid only while the box is as steady as when they were stored (opt-in)
    pool_stored_spread: bool = False
    # the sequential design's cap (launches each): its early looks' boundaries depend on it, so every
    # command that judges these runs (run, sweep, attribute, compare, report, plan, track --settle) uses it
    max_repeats: int = 16
    # each point starts from an empty prefix (radix) cache: POST /flush_cache before its warm-up, so a
    # point is not measured with the previous points' requests filling the KV pool (eviction work)
    flush_cache: bool = False
    # each point's warm-up reaches the point's concurrency (max(warmup, c) short requests, c in flight),
    # so the first batches of that size (lazy JIT, allocator growth) fall before the measured window
    warmup_fill: bool = False

    def params(self) -> dict:
        """The parameters that must match for two results to be comparable."""
        points = self.concurrency if self.driver == "serving" else self.batch_sizes
        return {
            "driver": self.driver,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "points": list(points),
            "num_prompts": self.num_prompts,
            "warmup": self.warmup,
            "seed": self.seed,
            "endpoint": self.endpoint if self.driver == "serving" else None,
            # procedures that change what a point measures; named only when on, so the runs of a
            # recipe without them keep their benchmark key
            **({"flush_cache": True} if self.flush_cache and self.driver == "serving" else {}),
            **({"warmup_fill": True} if self.warmup_fill and self.driver == "serving" else {}),
        }


@dataclass(frozen=True)
class BuildSpec:
    """The recipe's `[build]` table (constructed by `toolkit.recipe.load`)."""

    mode: str = "full"  # "full": resolve upstreams' deps; "overlay": see base_python's packages
    python: str | None = None  # full mode: interpreter path or version; default sys.executable
    base_python: str | None = None  # overlay mode: interpreter whose site-packages the env sees
    arch: tuple[str, ...] = ()  # "12.0a", "12.0f", "9.0a", "10.0a" ...
    jobs: int | None = None  # MAX_JOBS
    env: tuple[tuple[str, str], ...] = ()  # build env vars (sorted pairs), part of the identity
    packages: tuple[str, ...] = ()  # extra requirements installed with the env
    install: tuple[str, ...] | None = None  # which sources to install, in order; None = all
    editable: bool = False
    kernels: tuple[str, ...] = ()  # FlashInfer JIT module names to compile ahead of time
    cuda: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (source, .cu globs) compiled with nvcc
    nvcc_flags: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()  # uv --overrides: requirements that replace any declared pin
    excludes: tuple[str, ...] = ()  # uv --excludes: distributions left out of the resolution

    def identity(self) -> dict:
        """The fields that change what runs. `jobs` (parallelism only) is left out on purpose."""
        d = dataclasses.asdict(self)
        d.pop("jobs")
        for k in ("overrides", "excludes"):  # added later: empty, they leave older identities as they were
            if not d[k]:
                d.pop(k)
        return jsonable(d)

    def to_dict(self) -> dict:
        return jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BuildSpec":
        return cls(
            mode=d.get("mode", "full"),
            python=d.get("python"),
            base_python=d.get("base_python"),
            arch=tuple(d.get("arch", ())),
            jobs=d.get("jobs"),
            env=tuple((str(k), str(v)) for k, v in d.get("env", ())),
            packages=tuple(d.get("packages", ())),
            install=None if d.get("install") is None else tuple(d["install"]),
            editable=bool(d.get("editable", False)),
            kernels=tuple(d.get("kernels", ())),
            cuda=tuple((s, tuple(p)) for s, p in d.get("cuda", ())),
            nvcc_flags=tuple(d.get("nvcc_flags", ())),
            overrides=tuple(d.get("overrides", ())),
            excludes=tuple(d.get("excludes", ())),
        )


@dataclass(frozen=True)
class EvidenceSpec:
    """How a live server proves that one patch ran: server-log lines and/or /server_info fields.

    `log` is a regex matched line by line in the server log; at least `min_count` lines must match.
    Its named groups become run-level metrics (the mean of the numeric values over the matches).
    """

    patch: str  # the patch's name relative to patches/, e.g. "sglang/oea-topk.patch"
    log: str | None = None
    min_count: int = 1
    server_info: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class TargetSpec:
    """The recipe's `[target]`: the machine the run is meant for (`gpu` names a row of
    toolkit/data/gpus.toml; its compute capability and memory come from there). The static check
    presents this machine to the env's sglang, so defaults resolve as they will on the GPU box."""

    gpu: str
    count: int = 1
    strict: bool = False  # an unresolved static check is an error, not a warning


EVALS = ("gsm8k",)  # `[quality] eval` values: what toolkit.run.gate (and run.sgl_eval) can run


@dataclass(frozen=True)
class QualitySpec:
    """The recipe's `[quality]`: prompts (a resolved JSONL path), tokens per prompt, the points the
    check runs at (None: derived from the benchmark's, `toolkit.run.quality.points`) and the
    optional gate tier (`eval` through sglang's own evaluation, or the sgl-eval harness)."""

    prompts: Path
    max_tokens: int = 16
    concurrency: tuple[int, ...] | None = None
    count: int | None = None  # the first `count` prompts taken in turn from each kind (None: all)
    launches: int | None = None  # launches of one configuration that answer (None: 2 for a reference, else 1)
    logprobs: bool = True
    eval: str | None = None
    eval_harness: str = "sglang"  # or "sgl-eval" (toolkit.run.sgl_eval)
    eval_questions: int = 200
    min_accuracy: float | None = None
    max_drop: float | None = None
    dataset: Path | None = None
