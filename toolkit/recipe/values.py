"""A recipe's merged, expanded tables -> its spec values (pure): sources, patch paths, evidence,
build, server, benchmark and target settings, each checked with a one-line located BadInput."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Mapping

from toolkit.errors import BadInput
from toolkit.recipe.spec import EVALS, BenchSpec, BuildSpec, EvidenceSpec, QualitySpec, ServerSpec, SourceSpec, TargetSpec

DRIVERS = ("serving", "one-batch")
BUILD_MODES = ("full", "overlay")


def suggest(key: str, allowed) -> str | None:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def rel_name(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def evidence_specs(path: Path, table: dict, patches: Mapping[str, tuple[Path, ...]],
                    patches_dir: Path) -> dict[str, EvidenceSpec]:
    """`[evidence."PATCH"]` tables: keyed by a patch of this recipe, each with a valid regex."""
    names = [rel_name(p, patches_dir) for stack in patches.values() for p in stack]
    out = {}
    for patch, t in table.items():
        if patch not in names:
            raise BadInput(f"{path}: `evidence.\"{patch}\"` names no patch of this recipe",
                           hint=suggest(patch, names) or f"patches: {', '.join(names) or 'none'}")
        if not t.get("log") and not t.get("server_info"):
            raise BadInput(f"{path}: `evidence.\"{patch}\"` needs `log` or `server_info`")
        if t.get("log"):
            try:
                re.compile(t["log"])
            except re.error as exc:
                raise BadInput(f"{path}: `evidence.\"{patch}\".log` is not a valid regex: {exc}") from None
        min_count = t.get("min_count", 1)
        if min_count < 0:
            raise BadInput(f"{path}: `evidence.\"{patch}\".min_count` must be >= 0")
        out[patch] = EvidenceSpec(patch=patch, log=t.get("log"), min_count=min_count,
                                  server_info=tuple((t.get("server_info") or {}).items()))
    return out


def patch_paths(path: Path, sname: str, names: list[str], patches_dir: Path,
                 sources: Mapping[str, SourceSpec]) -> tuple[Path, ...]:
    """`patches.SOURCE`: files inside the project's patches/ (symlinks resolved), in order."""
    if sname not in sources:
        hint = suggest(sname, sources)
        if not sources:
            hint = "this recipe has no [sources]: did you forget `extends = \"...\"`?"
        raise BadInput(f"{path}: `patches.{sname}` names no source",
                       hint=hint or f"sources: {', '.join(sources)}")
    resolved = []
    for i, rel in enumerate(names):
        if rel in names[:i]:  # applied twice, the second would read "the base already contains this change"
            raise BadInput(f"{path}: `patches.{sname}` lists {rel} twice (entries {names.index(rel) + 1} and {i + 1})",
                           hint="each patch is one commit of the stack: list it once")
        p = (patches_dir / rel).resolve()
        if not is_under(p, patches_dir):
            raise BadInput(f"{path}: `patches.{sname}`: patch path `{rel}` leaves {patches_dir}",
                           hint="patch files live under patches/; copy the file there")
        if not p.is_file():
            raise BadInput(f"{path}: `patches.{sname}`: patch file {p} does not exist")
        resolved.append(p)
    return tuple(resolved)


def _str_list(path: Path, where: str, value: list) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in value):
        raise BadInput(f"{path}: `{where}` must be an array of strings")
    return tuple(value)


def _int_list(path: Path, where: str, value: list) -> tuple[int, ...]:
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise BadInput(f"{path}: `{where}` must be a non-empty array of positive integers")
    return tuple(value)


def build_spec(path: Path, t: dict, sources: Mapping[str, SourceSpec]) -> BuildSpec:
    mode = t.get("mode", "full")
    if mode not in BUILD_MODES:
        raise BadInput(f"{path}: `build.mode` must be full or overlay", hint=suggest(mode, BUILD_MODES))
    arch = _str_list(path, "build.arch", t.get("arch", []))
    for a in arch:
        if not re.fullmatch(r"\d+\.\d+[af]?", a):
            raise BadInput(f"{path}: `build.arch` entry `{a}` is not an arch like 12.0a, 12.0f, 9.0a")
    install = t.get("install")
    if install is not None:
        install = _str_list(path, "build.install", install)
        for s in install:
            if s not in sources:
                raise BadInput(f"{path}: `build.install` names unknown source `{s}`", hint=suggest(s, sources))
    cuda = []
    for src, globs in sorted(t.get("cuda", {}).items()):
        if src not in sources:
            raise BadInput(f"{path}: `build.cuda.{src}` names no source", hint=suggest(src, sources))
        if not isinstance(globs, list):
            raise BadInput(f"{path}: `build.cuda.{src}` must be an array of globs")
        cuda.append((src, _str_list(path, f"build.cuda.{src}", globs)))
    env = t.get("env", {})
    return BuildSpec(
        mode=mode,
        python=t.get("python"),
        base_python=t.get("base_python"),
        arch=arch,
        jobs=t.get("jobs"),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        packages=_str_list(path, "build.packages", t.get("packages", [])),
        install=install,
        editable=t.get("editable", False),
        kernels=_str_list(path, "build.kernels", t.get("kernels", [])),
        cuda=tuple(cuda),
        nvcc_flags=_str_list(path, "build.nvcc_flags", t.get("nvcc_flags", [])),
        overrides=_str_list(path, "build.overrides", t.get("overrides", [])),
        excludes=_str_list(path, "build.excludes", t.get("excludes", [])),
    )


# Flags patchbench itself puts on the server's command line (toolkit.run.sglang_args.launch_argv), each
# with the [server] key that sets it: in [server.args] they would come second and win, so the server
# would listen elsewhere than patchbench polls (a launch that "hangs" until timeout_s) or load another model.
OWN_FLAGS = {"port": "port", "host": "host", "model-path": "model", "model": "model"}


def server_spec(path: Path, t: dict) -> ServerSpec:
    from toolkit.recipe.server_config import merged

    args = []
    for flag, value in merged(path, list(t.get("args", {}).items())):
        if flag.startswith("-"):
            raise BadInput(f"{path}: `server.args` keys are flag names without dashes: `{flag.lstrip('-')}`")
        if flag in OWN_FLAGS:
            key = OWN_FLAGS[flag]
            raise BadInput(f"{path}: `server.args.{flag}` (or its config file): patchbench passes --{flag} itself "
                           f"(from `[server] {key}`)",
                           hint=f"write `{key} = {value!r}` under [server] instead".replace("'", '"'))
        args.append((flag, tuple(value) if isinstance(value, list) else value))
    gpus = t.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise BadInput(f"{path}: `server.gpus` must be a whole number of GPUs one server holds (0: none), "
                       f"not {gpus!r}")
    timeout = t.get("timeout_s", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise BadInput(f"{path}: `server.timeout_s` must be a positive number of seconds, not {timeout!r}")
    port = t.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise BadInput(f"{path}: `server.port` must be a TCP port (1-65535), not {port!r}")
    return ServerSpec(
        model=t.get("model"),
        args=tuple(args),
        env=tuple(sorted((str(k), str(v)) for k, v in t.get("env", {}).items())),
        timeout_s=float(timeout),
        host=t.get("host", "127.0.0.1"),
        port=port,
        gpus=gpus,
    )


def bench_spec(path: Path, t: dict) -> BenchSpec:
    driver = t.get("driver", "serving")
    if driver not in DRIVERS:
        raise BadInput(f"{path}: `benchmark.driver` must be one of {', '.join(DRIVERS)}", hint=suggest(driver, DRIVERS))
    defaults = BenchSpec()
    kw: dict[str, Any] = {"driver": driver}
    for key in ("input_len", "output_len", "num_prompts", "warmup", "seed", "repeats"):
        if key in t:
            if t[key] < 0 or (key in ("input_len", "output_len", "repeats", "num_prompts") and t[key] < 1):
                raise BadInput(f"{path}: `benchmark.{key}` must be positive")
            kw[key] = t[key]
    if "concurrency" in t:
        kw["concurrency"] = _int_list(path, "benchmark.concurrency", t["concurrency"])
    if "batch_sizes" in t:
        kw["batch_sizes"] = _int_list(path, "benchmark.batch_sizes", t["batch_sizes"])
    if "endpoint" in t:
        if t["endpoint"] not in ("generate", "completions"):
            raise BadInput(f"{path}: `benchmark.endpoint` must be generate or completions")
        kw["endpoint"] = t["endpoint"]
    if "timeout_s" in t:
        v = t["timeout_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise BadInput(f"{path}: `benchmark.timeout_s` must be a positive number of seconds, not {v!r}")
        kw["timeout_s"] = float(v)
    if "strict_box" in t:
        kw["strict_box"] = bool(t["strict_box"])
    if "min_effect" in t:
        if isinstance(t["min_effect"], bool) or not isinstance(t["min_effect"], (int, float)) \
                or not 0.0 <= t["min_effect"] < 1.0:
            raise BadInput(f"{path}: `benchmark.min_effect` must be a fraction in [0, 1) (0.02 is 2%)")
        kw["min_effect"] = float(t["min_effect"])
    if "max_repeats" in t:
        if isinstance(t["max_repeats"], bool) or not isinstance(t["max_repeats"], int) or t["max_repeats"] < 2:
            raise BadInput(f"{path}: `benchmark.max_repeats` must be an integer >= 2 (launches each)")
        kw["max_repeats"] = t["max_repeats"]
    for key in ("pool_stored_spread", "flush_cache", "warmup_fill"):
        if key in t:
            if not isinstance(t[key], bool):
                raise BadInput(f"{path}: `benchmark.{key}` must be true or false")
            kw[key] = t[key]
    return BenchSpec(**{**defaults.__dict__, **kw})


def target_spec(path: Path, t: dict | None) -> TargetSpec | None:
    """`[target]` -> TargetSpec; the GPU name is checked against gpus.toml by the static check."""
    if t is None:
        return None
    if "gpu" not in t:
        raise BadInput(f"{path}: `target` needs `gpu` (a name in toolkit/data/gpus.toml)")
    count = t.get("count", 1)
    try:
        count = int(count)
    except ValueError:
        raise BadInput(f"{path}: `target.count` must be a positive integer, not {count!r}") from None
    if count < 1:
        raise BadInput(f"{path}: `target.count` must be a positive integer, not {count}")
    strict = t.get("strict", False)
    if not isinstance(strict, bool):
        raise BadInput(f"{path}: `target.strict` must be true or false, not {strict!r}")
    return TargetSpec(gpu=t["gpu"], count=count, strict=strict)


def shipped_prompts(name: str) -> Path:
    from toolkit.resources import DATA_DIR

    return DATA_DIR / "prompts" / f"{name}.jsonl"


def quality_spec(path: Path, t: dict | None) -> QualitySpec | None:
    """`[quality]` -> QualitySpec (paths were made absolute by the loader); None without the table."""
    if t is None:
        return None
    prompts = t.get("prompts", "mixed-64")
    ppath = Path(prompts) if ("/" in prompts or prompts.endswith(".jsonl")) else shipped_prompts(prompts)
    if not ppath.is_file():
        raise BadInput(f"{path}: `quality.prompts`: {ppath} does not exist",
                       hint="a shipped set (mixed-64) or a JSONL file of {\"prompt\": \"...\"} lines")
    max_tokens = t.get("max_tokens", 16)
    if max_tokens < 1:
        raise BadInput(f"{path}: `quality.max_tokens` must be positive")
    points = _int_list(path, "quality.concurrency", t["concurrency"]) if "concurrency" in t else None
    for key in ("min_accuracy", "max_drop"):
        if key in t and not 0.0 <= float(t[key]) <= 1.0:
            raise BadInput(f"{path}: `quality.{key}` must be a fraction in [0, 1]")
    for key in ("eval_questions", "count"):
        if t.get(key, 1) < 1:
            raise BadInput(f"{path}: `quality.{key}` must be positive")
    if t.get("launches", 0) < 0:
        raise BadInput(f"{path}: `quality.launches` must be 0 (the check off) or more")
    if t.get("eval") is not None and t["eval"] not in EVALS:
        raise BadInput(f"{path}: `quality.eval = {t['eval']!r}` is not an evaluation patchbench runs",
                       hint=f"allowed: {', '.join(EVALS)}")
    if any(k in t for k in ("eval_harness", "eval_questions", "min_accuracy", "max_drop", "dataset")) and not t.get("eval"):
        raise BadInput(f"{path}: `quality` gate settings need `eval` (e.g. eval = \"gsm8k\")")
    return QualitySpec(prompts=ppath.resolve(), max_tokens=max_tokens, concurrency=points,
                       count=t.get("count"), launches=t.get("launches"),
                       logprobs=t.get("logprobs", True), eval=t.get("eval"),
                       eval_harness=t.get("eval_harness", "sglang"),
                       eval_questions=t.get("eval_questions", 200),
                       min_accuracy=None if "min_accuracy" not in t else float(t["min_accuracy"]),
                       max_drop=None if "max_drop" not in t else float(t["max_drop"]),
                       dataset=Path(t["dataset"]) if t.get("dataset") else None)
