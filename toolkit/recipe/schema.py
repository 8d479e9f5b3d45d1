"""The recipe file format as pydantic models: one place that says which keys exist and their types.

Each recipe file is validated on its own (before `extends` merges it), so an error names the file
that holds the mistake. `json_schema()` is what `patchbench schema` prints: editors that read JSON
Schema (Even Better TOML / taplo) complete and check recipe TOML with it.

Pure: no I/O. Errors become one-line `BadInput`s with the key and a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolkit.errors import BadInput

Scalar = Union[str, int, float, bool]
ArgValue = Union[Scalar, list[Scalar]]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SourceTable(_Table):
    """`[sources.NAME]`: exactly one of git, path, pypi."""

    git: str | None = Field(None, description="git URL or local path of a repository; needs `rev`")
    path: str | None = Field(None, description="a local directory used as it is (relative to the recipe file)")
    pypi: str | None = Field(None, description="a pinned requirement, `name==version`")
    rev: str | None = Field(None, description="tag, branch or commit (git sources)")
    package_dir: str | None = Field(None, description="where the Python project sits in the git tree, e.g. `python`")
    artifact: Literal["auto", "sdist", "wheel"] | None = Field(None, description="pypi: which artifact (auto: sdist when one exists)")
    sha256: str | None = Field(None, description="pypi: pin of the artifact's sha256")
    index: str | None = Field(None, description="pypi: package index URL or local directory (PEP 503 tree or flat wheel dir); default $PATCHBENCH_PYPI_INDEX or PyPI")


class BuildTable(_Table):
    """`[build]`: how the env is built (part of the env's identity)."""

    mode: Literal["full", "overlay"] | None = Field(None, description="full: resolve the upstreams' dependencies; overlay: reuse base_python's packages")
    python: str | None = Field(None, description="full mode: interpreter path or version")
    base_python: str | None = Field(None, description="overlay mode: interpreter whose site-packages the env sees")
    arch: list[str] | None = Field(None, description="CUDA arches, e.g. [\"12.0a\"] or [\"12.0f\"]")
    jobs: int | None = Field(None, description="build parallelism (MAX_JOBS); not part of the identity")
    env: dict[str, Scalar] | None = Field(None, description="build environment variables")
    packages: list[str] | None = Field(None, description="extra requirements installed into the env")
    install: list[str] | None = Field(None, description="which sources to install, in order (default: all)")
    editable: bool | None = None
    kernels: list[str] | None = Field(None, description="FlashInfer JIT generators compiled ahead of time")
    cuda: dict[str, list[str]] | None = Field(None, description="source -> .cu globs compiled with nvcc and checked with cuobjdump")
    nvcc_flags: list[str] | None = None
    overrides: list[str] | None = Field(None, description="requirements that replace any declared pin (uv --overrides), e.g. a CPU torch under sglang's CUDA pin")
    excludes: list[str] | None = Field(None, description="distributions left out of the resolution (uv --excludes), e.g. a CUDA-only kernel package on CPU")


class ServerTable(_Table):
    """`[server]`: how sglang is launched."""

    model: str | None = Field(None, description="--model-path")
    args: dict[str, ArgValue] | None = Field(None, description="flag (without dashes) -> value; true = bare flag, false = omitted")
    env: dict[str, Scalar] | None = Field(None, description="environment of the server process")
    timeout_s: float | None = Field(None, description="seconds to wait for /health_generate")
    host: str | None = None
    port: int | None = Field(None, description="default: a free port")
    gpus: int | None = Field(None, ge=0, description="0: runs without a GPU (the miniature)")


class BenchTable(_Table):
    """`[benchmark]`: the standard decode benchmark."""

    driver: Literal["serving", "one-batch"] | None = None
    input_len: int | None = None
    output_len: int | None = None
    concurrency: list[int] | None = Field(None, description="serving: concurrency points")
    batch_sizes: list[int] | None = Field(None, description="one-batch: batch sizes")
    num_prompts: int | None = None
    warmup: int | None = None
    seed: int | None = None
    repeats: int | None = Field(None, description="server launches per recipe, interleaved A B A B")
    min_effect: float | None = Field(None, description="the smallest effect `run`'s sequential verdict calls faster/slower "
                                     "and the half-width of its \"equal\" (a fraction: 0.02 is 2%, the default)")
    pool_stored_spread: bool | None = Field(None, description="the sequential verdict pools the launch-to-launch spread "
                                            "of stored launches of the same configuration (fewer launches; alpha kept while the "
                                            "box is up to 1.5x noisier now than then, not beyond)")
    max_repeats: int | None = Field(None, description="the sequential verdict's cap on launches each (default 16); "
                                    "its early looks' boundaries depend on it, so compare and report judge with it too")
    flush_cache: bool | None = Field(None, description="empty the server's prefix cache (POST /flush_cache) before each "
                                     "point, so no point is measured with earlier points' requests filling the KV pool")
    warmup_fill: bool | None = Field(None, description="each point's warm-up reaches the point's concurrency "
                                     "(max(warmup, c) short requests, c in flight) before the measured window")
    endpoint: Literal["generate", "completions"] | None = None
    timeout_s: float | None = None
    strict_box: bool | None = Field(None, description="store a run `invalid` when its GPUs throttled, were shared, or ran at clocks apart from the sweep's")


class RooflineTable(_Table):
    """`[roofline]`: the decode roofline this recipe is measured against."""

    model: str | None = Field(None, description="a shipped model config name (glm-5) or a path to config.json")
    gpu: str | None = None
    weights: str | None = Field(None, description="weight formats, e.g. `experts=nvfp4,rest=bf16`")
    context: int | None = None


class TargetTable(_Table):
    """`[target]`: the machine the run is meant for; the static check presents it to sglang."""

    gpu: str | None = Field(None, description="a GPU name in toolkit/data/gpus.toml, e.g. rtx-pro-6000")
    count: int | str | None = Field(None, description="GPUs on the box (an integer, or ${PATCHBENCH_GPUS:-8})")
    strict: bool | None = Field(None, description="an unresolved static check stops the run (as `run --strict-check`)")


class EvidenceTable(_Table):
    """`[evidence."PATCH"]`: how a live server proves the patch ran (checked after the benchmark)."""

    log: str | None = Field(None, description="a regex searched in server.log; named groups become run-level metrics")
    min_count: int | None = Field(None, description="matching lines needed (default 1)")
    server_info: dict[str, Scalar] | None = Field(None, description="/server_info field -> value")


class QualityTable(_Table):
    """`[quality]`: the output check run in the same launch after the benchmark (toolkit.run.quality)."""

    prompts: str | None = Field(None, description="a shipped prompt set (mixed-64, the default) or a JSONL file of {\"prompt\": ...} lines (relative to this file)")
    max_tokens: int | None = Field(None, description="tokens generated per prompt, greedy (default 16)")
    concurrency: list[int] | None = Field(None, description="points the prompts run at (default: the lowest and highest benchmark point the prompt count fills)")
    count: int | None = Field(None, description="use this many prompts of the set, taken in turn from each kind (default: all)")
    launches: int | None = Field(None, description="launches of one configuration whose answers are asked; later launches skip the check; 0 turns an inherited check off (default: 2 for a recipe that is its own compare_to, the floor needs two; 1 for a candidate)")
    logprobs: bool | None = Field(None, description="ask for logprobs and count non-finite ones as degenerate (default true)")
    eval: str | None = Field(None, description="gate tier: an evaluation sglang's own harness knows, e.g. gsm8k")
    eval_harness: Literal["sglang", "sgl-eval"] | None = Field(None, description="what runs the evaluation: sglang (the env's own sglang.test module, the default) or sgl-eval (the sgl-eval harness, in an env of its own)")
    eval_questions: int | None = Field(None, description="questions of the evaluation (default 200)")
    min_accuracy: float | None = Field(None, description="the evaluation's one-sided Wilson lower bound must reach this")
    max_drop: float | None = Field(None, description="largest accuracy drop against the reference (absolute, e.g. 0.02)")
    dataset: str | None = Field(None, description="the evaluation's data file (relative to this file; default from $PATCHBENCH_DATA)")


class RecipeFile(_Table):
    """One recipe file (`recipes/NAME.toml`), before `extends` merges it with its parent."""

    description: str | None = None
    extends: str | None = Field(None, description="a recipe name as the CLI takes it (relative to recipes/), or ./ or ../ path relative to this file")
    compare_to: str | None = Field(None, description="what `nox -s recipe-NAME` compares against")
    allow_binary_patches: bool | None = None
    sources: dict[str, SourceTable] | None = None
    patches: dict[str, list[str]] | None = Field(None, description="source -> patch files relative to patches/, applied in order")
    build: BuildTable | None = None
    server: ServerTable | None = None
    benchmark: BenchTable | None = None
    expect: dict[str, Any] | None = Field(None, description="effective-config field -> value, checked statically and at /server_info")
    roofline: RooflineTable | None = None
    target: TargetTable | None = None
    evidence: dict[str, EvidenceTable] | None = None
    matrix: dict[str, Any] | None = Field(None, description="lists of server.args.X / server.env.Y / benchmark.Z / patches.SRC values that expand to named variants NAME[k=v,...]; `exclude` and `include` lists of tables as in CI matrices (toolkit/recipe/matrix.py)")
    quality: QualityTable | None = None


def json_schema() -> dict:
    """The JSON Schema of a recipe file (for editors and `patchbench schema`)."""
    schema = RecipeFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "patchbench recipe"
    return schema


_TYPE_WORDS = {
    "string_type": "string",
    "int_type": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "dict_type": "table",
    "list_type": "array",
    "model_type": "table",
}


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The allowed keys of the table at `loc` (for "did you mean")."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            current = _model_of(info.annotation) if info else None
        elif current is None:
            return []
        # dict[str, Table] levels keep `current` (a key of the dict, then the table's fields)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _model_of(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _dotted(loc: tuple) -> str:
    tags = {"str", "int", "float", "bool"}
    return ".".join(str(p) for p in loc
                    if not isinstance(p, int) and str(p) not in tags and not str(p).startswith(("list[", "union[")))


def validate_file(path: Path, data: dict) -> RecipeFile:
    """Validate one recipe file's table; raise a one-line BadInput naming the file and key."""
    try:
        return RecipeFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        key = _dotted(loc)
        if err["type"] == "extra_forbidden":
            allowed = _fields_at(RecipeFile, loc)
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
            hint = f"did you mean `{close[0]}`?" if close else (f"allowed: {', '.join(allowed)}" if allowed else None)
            raise BadInput(f"{path}: unknown key `{key}`", hint=hint) from None
        if err["type"] == "literal_error":
            allowed = [s.strip().strip("'") for s in err["ctx"]["expected"].replace(" or ", ",").split(",")]
            close = difflib.get_close_matches(str(err["input"]), allowed, n=1)
            raise BadInput(f"{path}: `{key}` must be one of {', '.join(allowed)}",
                           hint=f"did you mean `{close[0]}`?" if close else None) from None
        hint = _args_table_hint(err["input"]) if key == "server.args" else None
        if err["type"] in _TYPE_WORDS or err["type"].endswith("_type"):
            want = _TYPE_WORDS.get(err["type"], err["msg"].lower())
            raise BadInput(f"{path}: `{key}` must be {want}, not {type(err['input']).__name__}", hint=hint) from None
        # a constraint on a value of the right type ("Input should be greater than or equal to 0")
        said = err["msg"][:1].lower() + err["msg"][1:]
        raise BadInput(f"{path}: `{key}` = {err['input']!r}: {said}", hint=hint) from None


def _toml_value(text: str) -> str:
    for kind in (int, float):
        try:
            kind(text)
            return text
        except ValueError:
            pass
    return "true" if text == "" else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _args_table_hint(value: Any) -> str | None:
    """`args = ["--tp-size", "8", "--enable-x"]` (sglang's command line) as the table it means:
    `[server.args]` with `tp-size = 8` and `enable-x = true` (a flag without a value)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    pairs, i = [], 0
    while i < len(value):
        flag = value[i]
        if not flag.startswith("--"):
            return None
        name, eq, val = flag[2:].partition("=")
        if not eq and i + 1 < len(value) and not value[i + 1].startswith("--"):
            val, i = value[i + 1], i + 1
        pairs.append(f"{name} = {_toml_value(val)}")
        i += 1
    return "write the flags as a table, one per line, without the dashes: [server.args] " + "; ".join(pairs)
