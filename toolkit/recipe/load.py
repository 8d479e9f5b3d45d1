r"""Recipes: `recipes/NAME.toml` -> a validated, fully resolved `Recipe` (pure; reads TOML only).

A recipe declares everything that defines one experiment variant:

```toml
description = "SBO + OEA on the baseline"
extends = "baseline"            # optional: inherit everything; patch lists extend, other values override
compare_to = "baseline"         # what `nox -s recipe-NAME` compares against (default: baseline)
allow_binary_patches = false

[sources.sglang]                # one table per upstream
git = "https://github.com/sgl-project/sglang"   # or: path = "../sglang", or: pypi = "sglang==0.5.23"
rev = "v0.5.23"                 # tag, branch or commit (git/path sources)
package_dir = "python"          # where the Python project sits in the git tree
artifact = "auto"               # pypi only: "sdist", "wheel" or "auto" (sdist when one exists)
sha256 = "..."                  # pypi only, optional pin of the artifact

[patches]
sglang = ["sglang/oea-topk.patch"]   # ordered; relative to patches/ beside recipes/

[build]      # see toolkit.envs.BuildSpec: mode, python, base_python, arch, jobs, env, packages,
             # install, editable, kernels, cuda (table source -> globs), nvcc_flags, overrides, excludes
[server]     # model (a path, or tiny:<name>: toolkit.models.tiny), args (flag -> value; true = bare flag;
             # config = "FILE.yaml": sglang's --config file, read into args: toolkit.recipe.server_config), env, timeout_s, host, port
[benchmark]  # driver ("serving" | "one-batch"), input_len, output_len, concurrency, batch_sizes,
             # num_prompts, warmup, seed, repeats, endpoint, strict_box (GPU state flags -> invalid),
             # min_effect (run's sequential verdicts: the indifference zone, default 0.02),
             # pool_stored_spread (the sequential looks pool stored launches' spread: opt-in),
             # max_repeats (the sequential design's cap on launches each, default 16)
[expect]     # effective-config expectations: field -> value (checked statically and at /server_info)
[roofline]   # model (config name or path), gpu, weights, context
[evidence."sglang/oea-topk.patch"]   # how a live server proves the patch ran (checked after the benchmark)
log = 'OEA active: tokens=\d+ distinct_before=\d+ distinct_after=(?P<distinct_experts>\d+)'
min_count = 1                        # named groups become run-level metrics; or server_info = {field = value}
[target]     # gpu (a name in toolkit/data/gpus.toml), count: the machine the static check presents;
             # strict = true: an unresolved check stops the run (exit 2), as `run --strict-check`
[matrix]     # lists of server.args.X / server.env.Y / benchmark.Z / patches.SRC values -> variants
             # NAME[k=v,...], each a full recipe; include/exclude (toolkit/recipe/matrix.py)
[quality]    # prompts (mixed-64 or a JSONL path), count, max_tokens, concurrency, logprobs, launches;
             # gate tier: eval, eval_harness (sglang | sgl-eval), eval_questions, min_accuracy,
             # max_drop, dataset (toolkit.run.quality, toolkit.run.gate)
```

`extends` takes a recipe name exactly as the command line does (relative to `recipes/`, e.g.
`demo/baseline`), or a path starting with `./` or `../` (relative to the recipe file). Child values
override the parent's; tables merge key by key; patch lists extend the parent's stack; a child
source table that names another kind (git, path or pypi) than the parent's replaces the parent's
source table whole (the same kind merges: `pypi = "sglang==0.5.10.post1"` keeps `package_dir`).
Patch paths must stay inside the project's `patches/` (symlinks resolved).
`patchbench show NAME` prints the resolved recipe with the file every value came from;
`patchbench schema` prints the JSON Schema of the format (`toolkit.recipe.schema`).

Strings may use `${VAR}` or `${VAR:-default}`; an unset variable without a default is an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from toolkit.errors import BadInput
from toolkit.models import tiny
from toolkit.recipe.matrix import Variant, apply_settings, split_variant, validate_settings, variants_of
from toolkit.recipe.schema import validate_file
from toolkit.recipe.values import (bench_spec, build_spec, evidence_specs, is_under, patch_paths, quality_spec,
                                   rel_name, server_spec, target_spec)
from toolkit.recipe.spec import (BenchSpec, BuildSpec, EvidenceSpec, QualitySpec, ServerSpec, SourceSpec, TargetSpec,
                                 jsonable)
from toolkit.resources import PROJECT_DIR

RECIPES_DIRNAME = "recipes"
PATCHES_DIRNAME = "patches"

SOURCE_KINDS = ("git", "path", "pypi")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


CONFIGURATION_TABLES = ("sources", "patches", "build", "server", "benchmark", "target")


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    description: str
    sources: Mapping[str, SourceSpec]
    patches: Mapping[str, tuple[Path, ...]]  # source -> absolute patch paths, in order
    build: BuildSpec
    server: ServerSpec
    benchmark: BenchSpec
    expect: Mapping[str, Any]
    roofline: Mapping[str, Any]
    compare_to: str | None = "baseline"
    allow_binary_patches: bool = False
    patches_dir: Path = Path(PATCHES_DIRNAME)
    evidence: Mapping[str, EvidenceSpec] = field(default_factory=dict)  # patch name -> proof it ran
    raw: Mapping[str, Any] = field(default_factory=dict)  # the merged, expanded table
    origins: Mapping[str, Path] = field(default_factory=dict)  # dotted key -> file it came from
    target: TargetSpec | None = None
    quality: QualitySpec | None = None  # [quality]: the output check after the benchmark

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".lock.json")

    def patch_names(self, source: str) -> tuple[str, ...]:
        return tuple(rel_name(p, self.patches_dir) for p in self.patches.get(source, ()))

    def to_dict(self) -> dict:
        """The fully resolved recipe, as stored with every result."""
        return {"name": self.name, "path": str(self.path), **jsonable(self.raw)}

    def configuration(self) -> dict:
        """The tables that make its runs' identity (sources, patches, build, server, benchmark,
        target): two recipes equal here are one configuration under two names."""
        raw = jsonable(dict(self.raw))
        return {k: raw.get(k) for k in CONFIGURATION_TABLES}


# ---------------------------------------------------------------------------------------- loading


def find_recipes_dir(start: Path | None = None) -> Path:
    """`recipes/` of the project: $PATCHBENCH_RECIPES, else ./recipes, else beside this package."""
    env = os.environ.get("PATCHBENCH_RECIPES")
    if env:
        return Path(env).resolve()
    cwd = (start or Path.cwd()) / RECIPES_DIRNAME
    if cwd.is_dir():
        return cwd.resolve()
    return (PROJECT_DIR / RECIPES_DIRNAME).resolve()


def resolve_recipe_path(ref: str | Path, recipes_dir: Path | None = None) -> Path:
    """A recipe name (`baseline`, `demo/fast`) or a path to a .toml file -> the file's path. A matrix
    variant's name (`NAME[k=v,...]`, toolkit/recipe/matrix.py) resolves to NAME's file."""
    ref_s = split_variant(str(ref))[0]
    as_path = Path(ref_s).expanduser()
    if ref_s.endswith(".toml") or as_path.is_file():
        if not as_path.is_file():
            raise BadInput(f"recipe file {ref_s} does not exist")
        return as_path.resolve()
    root = recipes_dir or find_recipes_dir()
    candidate = root / f"{ref_s}.toml"
    if candidate.is_file():
        return candidate.resolve()
    known = list_recipe_names(root)
    close = difflib.get_close_matches(ref_s, known, n=1)
    hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(known) or 'none'}"
    raise BadInput(f"no recipe named `{ref_s}` in {root}", hint=hint)


def list_recipe_names(recipes_dir: Path | None = None) -> list[str]:
    root = recipes_dir or find_recipes_dir()
    if not root.is_dir():
        return []
    return sorted(
        str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.toml") if p.is_file()
    )


def compared_against(recipe: Recipe) -> frozenset[str]:
    """The names the recipes of `recipe`'s `recipes/` tree declare as `compare_to`: the references
    of the project (none for a recipe outside a `recipes/` folder; an unreadable file names none).
    Each file is parsed once per version of it."""
    root = next((d for d in Path(recipe.path).parents if d.name == RECIPES_DIRNAME), None)
    if root is None:
        return frozenset()
    return frozenset(t for f in root.rglob("*.toml") if (t := _compare_to_of(f, f.stat().st_mtime_ns)))


@functools.lru_cache(maxsize=4096)
def _compare_to_of(path: Path, mtime_ns: int) -> str | None:
    try:
        target = _read_toml(path).get("compare_to")
    except BadInput:
        return None
    return target if isinstance(target, str) else None


def recipe_name(path: Path, recipes_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(recipes_dir).with_suffix(""))
    except ValueError:
        return path.stem


def _recipes_root_for(path: Path) -> Path:
    """The `recipes/` directory that holds `path` (any ancestor named recipes), else its parent."""
    for parent in path.parents:
        if parent.name == RECIPES_DIRNAME:
            return parent
    return path.parent


def load_recipe(ref: str | Path, recipes_dir: Path | None = None) -> Recipe:
    """Load, merge (`extends`), expand and validate a recipe. Raises BadInput with one line.
    `NAME[k=v,...]` loads that variant of NAME's `[matrix]` (toolkit/recipe/matrix.py)."""
    base, body = split_variant(str(ref))
    if body is not None:
        recipe = load_recipe(base, recipes_dir)
        return pick_variant(recipe, f"{recipe.name}[{body}]")
    path = resolve_recipe_path(ref, recipes_dir)
    root = recipes_dir if recipes_dir and is_under(path, recipes_dir) else _recipes_root_for(path)
    name = recipe_name(path, root)
    merged, origins = _load_merged(path, root, chain=())
    recipe = _build_recipe(name, path, root, merged)
    return dataclasses.replace(recipe, origins=origins)


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read recipe: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not a UTF-8 text file (byte {exc.start}): a recipe is TOML text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise BadInput(f"{where}: TOML syntax error: {msg}") from None


def _load_merged(path: Path, root: Path, chain: tuple[Path, ...]) -> tuple[dict, dict[str, Path]]:
    """The merged table of `path` and its ancestors, and the file each leaf value came from."""
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise BadInput(f"{chain[0]}: `extends` cycle: {cycle}")
    data = _read_toml(path)
    validate_file(path, data)
    data = _expand(data, path, "")  # each file's ${VAR}s with its own name and keys, before any merge
    data = _absolute_locations(path, data)
    own = {key: path for key in _leaf_keys(data)}
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data, own
    parent_path = _resolve_parent(path, root, parent_ref)
    parent, origins = _load_merged(parent_path, root, (*chain, path))
    merged = _merge(parent, data)
    if "description" not in data:  # not the parent's words: what this recipe adds to it
        merged["description"] = child_description(recipe_name(parent_path, root), recipe_name(path, root), data)
    leaves = set(_leaf_keys(merged))  # origins' own spelling: a patch name's dots are not nesting
    kept = {k: v for k, v in origins.items() if k in leaves and k not in own}
    return merged, {**kept, **{k: v for k, v in own.items() if k != "extends"}}


def child_description(parent: str, name: str, own: dict, limit: int = 4) -> str:
    """"demo/baseline + mine/quick: benchmark.concurrency = [1, 8, 32]": a recipe without its own
    description, told by its parent and what it sets (patches it adds, values it overrides)."""
    changes: list[str] = []

    def walk(table: dict, prefix: str) -> None:
        for key, value in table.items():
            dotted = f"{prefix}{key}"
            if not prefix and key in ("extends", "description", "compare_to"):
                continue
            if prefix == "patches." and isinstance(value, list):
                changes.append(", ".join(f"+{v}" for v in value))
            elif not prefix and key == "evidence" and isinstance(value, dict):
                changes.append(f"evidence for {', '.join(value)}")
            elif isinstance(value, dict) and value:
                walk(value, dotted + ".")
            elif prefix.startswith("sources."):
                if key in SOURCE_KINDS + ("rev",):
                    changes.append(f"{prefix.split('.')[1]} at {Path(str(value)).name if key == 'path' else value}")
            else:
                changes.append(f"{dotted} = {json.dumps(value) if isinstance(value, (list, dict, bool)) else value}")

    walk(own, "")
    shown = changes[:limit] + ([f"... ({len(changes) - limit} more)"] if len(changes) > limit else [])
    return f"{parent} + {name}: {'; '.join(shown) if shown else 'as it is'}"


def _absolute_locations(path: Path, data: dict) -> dict:
    """Local git/path source locations are relative to the file that names them."""
    sources = {}
    for sname, table in (data.get("sources") or {}).items():
        table = dict(table)
        for kind in ("path", "git", "index"):
            loc = table.get(kind)
            if isinstance(loc, str) and not (kind == "git" and re.match(r"^[a-z+]+://|^git@", loc)) \
                    and "${" not in loc:
                table[kind] = str((path.parent / loc).resolve())
        sources[sname] = table
    data = {**data, "sources": sources} if sources else data
    server = data.get("server") or {}
    config = (server.get("args") or {}).get("config")  # sglang's server-args file (toolkit.recipe.server_config)
    if isinstance(config, str) and config and "${" not in config:
        data = {**data, "server": {**server, "args": {**server["args"], "config": str((path.parent / config).resolve())}}}
    quality = dict(data.get("quality") or {})
    for key in ("prompts", "dataset"):  # a file path (not a shipped set's name) is relative to this file
        loc = quality.get(key)
        if isinstance(loc, str) and "${" not in loc and (key == "dataset" or "/" in loc or loc.endswith(".jsonl")):
            quality[key] = str((path.parent / loc).resolve())
    return {**data, "quality": quality} if quality else data


def _leaf_keys(table: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("args", "env", "expect"):
            keys.extend(_leaf_keys(value, dotted + "."))
        elif isinstance(value, dict) and value:
            keys.extend(f"{dotted}.{k}" for k in value)
        else:
            keys.append(dotted)
    return keys


def _resolve_parent(path: Path, root: Path, ref: str) -> Path:
    """`extends`: a recipe name relative to recipes/ (as the CLI takes it), or ./ ../ relative paths."""
    if ref.startswith(("./", "../")):
        candidate = (path.parent / ref)
        candidate = candidate if candidate.suffix == ".toml" else candidate.with_name(candidate.name + ".toml")
    else:
        candidate = root / f"{ref}.toml"
    if candidate.is_file():
        return candidate.resolve()
    known = [n for n in list_recipe_names(root) if n != recipe_name(path, root)]  # never itself
    close = difflib.get_close_matches(ref, known, n=1)
    sibling = f"{recipe_name(path.parent, root)}/{ref}" if path.parent != root else None
    if sibling in known:
        hint = f"names are relative to {root}: did you mean `{sibling}` (or `./{ref}`)?"
    else:
        hint = f"did you mean `{close[0]}`?" if close else f"names are relative to {root}"
    raise BadInput(f"{path}: extends: no recipe named `{ref}`", hint=hint)


def _merge(parent: dict, child: dict) -> dict:
    """Child overrides parent; tables merge recursively; patch lists extend the parent's stack;
    a child source table naming another kind (git/path/pypi) replaces the parent's source whole."""
    out = dict(parent)
    for key, value in child.items():
        if key == "extends":
            continue
        if key == "patches" and isinstance(value, dict):
            stacks = {k: list(v) for k, v in parent.get("patches", {}).items()}
            for src, lst in value.items():
                stacks[src] = stacks.get(src, []) + [p for p in lst if p not in stacks.get(src, [])]
            out[key] = stacks
        elif key == "sources" and isinstance(value, dict):
            sources = dict(parent.get("sources", {}))
            for sname, table in value.items():
                before = sources.get(sname, {})
                kind = next((k for k in SOURCE_KINDS if k in table), None)
                replaces = kind is not None and kind not in before  # git -> pypi, say: a new source
                sources[sname] = dict(table) if replaces else _merge(before, table)
            out[key] = sources
        elif isinstance(value, dict) and isinstance(parent.get(key), dict):
            out[key] = _merge(parent[key], value)
        else:
            out[key] = value
    out.pop("extends", None)
    return out


def _expand(value: Any, path: Path, where: str) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match) -> str:
            var, default = m.group(1), m.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            raise BadInput(
                f"{path}: `{where}` uses ${{{var}}}, which is not set",
                hint=f"export {var}=... or write ${{{var}:-default}}",
            )

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, path, f"{where}.{k}" if where else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, path, where) for v in value]
    return value


def _build_recipe(name: str, path: Path, root: Path, data: dict) -> Recipe:
    data = _expand(data, path, "")
    patches_dir = (root.parent / PATCHES_DIRNAME).resolve()

    sources: dict[str, SourceSpec] = {}
    for sname, table in data.get("sources", {}).items():
        kinds = [k for k in SOURCE_KINDS if k in table]
        if len(kinds) != 1:
            raise BadInput(
                f"{path}: `sources.{sname}` needs exactly one of git, path, pypi "
                f"(found {', '.join(kinds) or 'none'})"
            )
        kind = kinds[0]
        location = table[kind]
        if kind == "path" or (kind == "git" and not re.match(r"^[a-z+]+://|^git@", location)):
            location = str((path.parent / location).resolve())
        index = table.get("index")
        if index and "://" not in index:
            index = str((path.parent / index).resolve())
        artifact = table.get("artifact", "auto")
        if kind == "git" and "rev" not in table:
            raise BadInput(f"{path}: `sources.{sname}` is a git source and needs `rev`")
        if kind == "pypi" and "==" not in location:
            raise BadInput(
                f"{path}: `sources.{sname}.pypi` must pin a version (`{location}==X.Y.Z`)"
            )
        sources[sname] = SourceSpec(
            name=sname,
            kind=kind,
            location=location,
            rev=table.get("rev"),
            package_dir=table.get("package_dir", "").strip("/"),
            artifact=artifact,
            sha256=table.get("sha256"),
            index=index,
        )

    patches = {sname: patch_paths(path, sname, lst, patches_dir, sources)
               for sname, lst in data.get("patches", {}).items()}
    evidence = evidence_specs(path, data.get("evidence", {}), patches, patches_dir)

    build = build_spec(path, data.get("build", {}), sources)
    server = server_spec(path, data.get("server", {}))
    if server.model and server.model.startswith(tiny.SCHEME):
        # a model patchbench writes itself: its directory, written on first use (seconds), cached by key
        server = dataclasses.replace(server, model=tiny.resolve(server.model))
    bench = bench_spec(path, data.get("benchmark", {}))
    return Recipe(
        name=name,
        path=path,
        description=data.get("description", ""),
        sources=sources,
        patches=patches,
        build=build,
        server=server,
        benchmark=bench,
        expect=dict(data.get("expect", {})),
        roofline=dict(data.get("roofline", {})),
        compare_to=data.get("compare_to", "baseline"),
        allow_binary_patches=data.get("allow_binary_patches", False),
        patches_dir=patches_dir,
        evidence=evidence,
        raw=data,
        target=target_spec(path, data.get("target")),
        quality=quality_spec(path, data.get("quality")),
    )


# ---------------------------------------------------------------------------------------- [matrix]


def variant_recipe(recipe: Recipe, variant: Variant) -> Recipe:
    """One variant of `recipe`'s `[matrix]` (toolkit/recipe/matrix.py) as a full Recipe: its own
    name, the variant's settings applied, no `[matrix]`."""
    try:
        validate_settings(recipe.path, variant.settings)
        raw = apply_settings(dict(recipe.raw), variant.settings)
        built = _build_recipe(variant.name, recipe.path, recipe.patches_dir.parent / RECIPES_DIRNAME, raw)
    except BadInput as exc:  # the value came from the [matrix]: name the variant that carries it
        text = exc.message.removeprefix(f"{recipe.path}: ")
        raise BadInput(f"{recipe.path}: [matrix] variant {variant.name}: {text}", hint=exc.hint) from None
    return dataclasses.replace(built, origins={**recipe.origins, **{k: recipe.path for k, _ in variant.settings}})


def expand_recipe(recipe: Recipe) -> list[Recipe]:
    """Every variant of `recipe` as a Recipe ([] without a matrix)."""
    return [variant_recipe(recipe, v) for v in variants_of(recipe)]


def pick_variant(recipe: Recipe, ref: str) -> Recipe:
    """The variant of `recipe` named `ref` (BadInput naming the closest otherwise)."""
    variants = variants_of(recipe)
    for v in variants:
        if v.name == ref:
            return variant_recipe(recipe, v)
    names = [v.name for v in variants]
    if not names:
        raise BadInput(f"no variant `{ref}`: recipe `{recipe.name}` has no [matrix]")
    close = difflib.get_close_matches(ref, names, n=1)
    raise BadInput(f"no variant `{ref}` in the matrix of `{recipe.name}`",
                   hint=f"did you mean `{close[0]}`?" if close else f"variants: {', '.join(names)}")
