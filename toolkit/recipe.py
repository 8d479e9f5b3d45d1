"""Recipes: `recipes/NAME.toml` -> a validated, fully resolved `Recipe` (pure; reads TOML only).

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
             # install, editable, kernels, cuda (table source -> globs), nvcc_flags
[server]     # model, args (flag -> value; true = bare flag), env, timeout_s, host, port
[benchmark]  # driver ("serving" | "one-batch"), input_len, output_len, concurrency, batch_sizes,
             # num_prompts, warmup, seed, repeats, endpoint
[expect]     # effective-config expectations: field -> value (checked statically and at /server_info)
[roofline]   # model (config name or path), gpu, weights, context
[target]     # gpu (a name in toolkit/data/gpus.toml), count: the machine the static check presents
```

Strings may use `${VAR}` or `${VAR:-default}`; an unset variable without a default is an error.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from toolkit.errors import BadInput
from toolkit.spec import BenchSpec, BuildSpec, ServerSpec, SourceSpec, TargetSpec

RECIPES_DIRNAME = "recipes"
PATCHES_DIRNAME = "patches"

# The schema: key -> expected type(s). Nested tables are dicts of their own schema.
_SOURCE_KEYS = {
    "git": str,
    "path": str,
    "pypi": str,
    "rev": str,
    "package_dir": str,
    "artifact": str,
    "sha256": str,
}
_BUILD_KEYS = {
    "mode": str,
    "python": str,
    "base_python": str,
    "arch": list,
    "jobs": int,
    "env": dict,
    "packages": list,
    "install": list,
    "editable": bool,
    "kernels": list,
    "cuda": dict,
    "nvcc_flags": list,
}
_SERVER_KEYS = {
    "model": str,
    "args": dict,
    "env": dict,
    "timeout_s": (int, float),
    "host": str,
    "port": int,
    "gpus": int,
}
_BENCH_KEYS = {
    "driver": str,
    "input_len": int,
    "output_len": int,
    "concurrency": list,
    "batch_sizes": list,
    "num_prompts": int,
    "warmup": int,
    "seed": int,
    "repeats": int,
    "endpoint": str,
    "timeout_s": (int, float),
}
_ROOFLINE_KEYS = {
    "model": str,
    "gpu": str,
    "weights": str,
    "context": int,
}
_TARGET_KEYS = {
    "gpu": str,
    "count": (int, str),  # a string may be ${PATCHBENCH_GPUS:-8}
}
_TOP_KEYS = {
    "description": str,
    "extends": str,
    "compare_to": str,
    "allow_binary_patches": bool,
    "sources": dict,
    "patches": dict,
    "build": dict,
    "server": dict,
    "benchmark": dict,
    "expect": dict,
    "roofline": dict,
    "target": dict,
}
_TABLE_SCHEMAS = {
    "build": _BUILD_KEYS,
    "server": _SERVER_KEYS,
    "benchmark": _BENCH_KEYS,
    "roofline": _ROOFLINE_KEYS,
    "target": _TARGET_KEYS,
}
DRIVERS = ("serving", "one-batch")
BUILD_MODES = ("full", "overlay")
ARTIFACT_KINDS = ("auto", "sdist", "wheel")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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
    raw: Mapping[str, Any] = field(default_factory=dict)  # the merged, expanded table
    target: TargetSpec | None = None

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".lock.json")

    def patch_names(self, source: str) -> tuple[str, ...]:
        return tuple(_rel(p, self.patches_dir) for p in self.patches.get(source, ()))

    def to_dict(self) -> dict:
        """The fully resolved recipe, as stored with every result."""
        return {"name": self.name, "path": str(self.path), **_jsonable(self.raw)}


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------- loading


def find_recipes_dir(start: Path | None = None) -> Path:
    """`recipes/` of the project: $PATCHBENCH_RECIPES, else ./recipes, else beside this package."""
    env = os.environ.get("PATCHBENCH_RECIPES")
    if env:
        return Path(env).resolve()
    cwd = (start or Path.cwd()) / RECIPES_DIRNAME
    if cwd.is_dir():
        return cwd.resolve()
    return (Path(__file__).resolve().parent.parent / RECIPES_DIRNAME).resolve()


def resolve_recipe_path(ref: str | Path, recipes_dir: Path | None = None) -> Path:
    """A recipe name (`baseline`, `demo/fast`) or a path to a .toml file -> the file's path."""
    ref_s = str(ref)
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
    """Load, merge (`extends`), expand and validate a recipe. Raises BadInput with one line."""
    path = resolve_recipe_path(ref, recipes_dir)
    root = recipes_dir if recipes_dir and _is_under(path, recipes_dir) else _recipes_root_for(path)
    name = recipe_name(path, root)
    merged = _load_merged(path, root, chain=())
    return _build_recipe(name, path, root, merged)


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read recipe: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise BadInput(f"{where}: TOML syntax error: {msg}") from None


def _load_merged(path: Path, root: Path, chain: tuple[Path, ...]) -> dict:
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise BadInput(f"{chain[0]}: `extends` cycle: {cycle}")
    data = _read_toml(path)
    _check_schema(path, data)
    # Patch paths are resolved per file, so that a child's relative names stay its own.
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data
    parent_path = _resolve_parent(path, root, parent_ref)
    parent = _load_merged(parent_path, root, (*chain, path))
    return _merge(parent, data)


def _resolve_parent(path: Path, root: Path, ref: str) -> Path:
    for base in (path.parent, root):
        candidate = base / f"{ref}.toml"
        if candidate.is_file():
            return candidate.resolve()
    known = list_recipe_names(root)
    close = difflib.get_close_matches(ref, known, n=1)
    hint = f"did you mean `{close[0]}`?" if close else None
    raise BadInput(f"{path}: extends: no recipe named `{ref}`", hint=hint)


def _merge(parent: dict, child: dict) -> dict:
    """Child overrides parent; tables merge recursively; patch lists extend the parent's stack."""
    out = dict(parent)
    for key, value in child.items():
        if key == "extends":
            continue
        if key == "patches" and isinstance(value, dict):
            stacks = {k: list(v) for k, v in parent.get("patches", {}).items()}
            for src, lst in value.items():
                stacks[src] = stacks.get(src, []) + [p for p in lst if p not in stacks.get(src, [])]
            out[key] = stacks
        elif isinstance(value, dict) and isinstance(parent.get(key), dict):
            out[key] = _merge(parent[key], value)
        else:
            out[key] = value
    out.pop("extends", None)
    return out


def _suggest(key: str, allowed) -> str | None:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def _type_name(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return {"str": "string", "dict": "table", "list": "array", "int": "integer"}.get(
        t.__name__, t.__name__
    )


def _check_table(path: Path, prefix: str, table: dict, schema: dict) -> None:
    for key, value in table.items():
        if key not in schema:
            raise BadInput(
                f"{path}: unknown key `{prefix}{key}`",
                hint=_suggest(key, schema) or f"allowed: {', '.join(schema)}",
            )
        expected = schema[key]
        if isinstance(value, bool) and expected is not bool and not (
            isinstance(expected, tuple) and bool in expected
        ):
            ok = False
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise BadInput(
                f"{path}: `{prefix}{key}` must be {_type_name(expected)}, "
                f"not {type(value).__name__}"
            )


def _check_schema(path: Path, data: dict) -> None:
    _check_table(path, "", data, _TOP_KEYS)
    for name, table in data.get("sources", {}).items():
        if not isinstance(table, dict):
            raise BadInput(f"{path}: `sources.{name}` must be a table")
        _check_table(path, f"sources.{name}.", table, _SOURCE_KEYS)
    for name, lst in data.get("patches", {}).items():
        if not isinstance(lst, list) or not all(isinstance(p, str) for p in lst):
            raise BadInput(f"{path}: `patches.{name}` must be an array of patch file names")
    for table_name, schema in _TABLE_SCHEMAS.items():
        if table_name in data:
            _check_table(path, f"{table_name}.", data[table_name], schema)
    for key, value in data.get("server", {}).get("args", {}).items():
        if isinstance(value, dict):
            raise BadInput(f"{path}: `server.args.{key}` must be a value, not a table")
    # Patch files are checked where the path is known: relative to patches/ of this recipe tree.


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
        kinds = [k for k in ("git", "path", "pypi") if k in table]
        if len(kinds) != 1:
            raise BadInput(
                f"{path}: `sources.{sname}` needs exactly one of git, path, pypi "
                f"(found {', '.join(kinds) or 'none'})"
            )
        kind = kinds[0]
        location = table[kind]
        if kind == "path" or (kind == "git" and not re.match(r"^[a-z+]+://|^git@", location)):
            location = str((path.parent / location).resolve())
        artifact = table.get("artifact", "auto")
        if artifact not in ARTIFACT_KINDS:
            raise BadInput(
                f"{path}: `sources.{sname}.artifact` must be one of {', '.join(ARTIFACT_KINDS)}",
                hint=_suggest(artifact, ARTIFACT_KINDS),
            )
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
        )

    patches: dict[str, tuple[Path, ...]] = {}
    for sname, lst in data.get("patches", {}).items():
        if sname not in sources:
            raise BadInput(
                f"{path}: `patches.{sname}` names no source",
                hint=_suggest(sname, sources) or f"sources: {', '.join(sources) or 'none'}",
            )
        resolved = []
        for rel in lst:
            p = (patches_dir / rel).resolve()
            if not p.is_file():
                raise BadInput(f"{path}: `patches.{sname}`: patch file {p} does not exist")
            resolved.append(p)
        patches[sname] = tuple(resolved)

    build = _build_spec(path, data.get("build", {}), sources)
    server = _server_spec(path, data.get("server", {}))
    bench = _bench_spec(path, data.get("benchmark", {}))
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
        raw=data,
        target=_target_spec(path, data.get("target")),
    )


def _str_list(path: Path, where: str, value: list) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in value):
        raise BadInput(f"{path}: `{where}` must be an array of strings")
    return tuple(value)


def _int_list(path: Path, where: str, value: list) -> tuple[int, ...]:
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise BadInput(f"{path}: `{where}` must be a non-empty array of positive integers")
    return tuple(value)


def _build_spec(path: Path, t: dict, sources: Mapping[str, SourceSpec]) -> BuildSpec:
    mode = t.get("mode", "full")
    if mode not in BUILD_MODES:
        raise BadInput(f"{path}: `build.mode` must be full or overlay", hint=_suggest(mode, BUILD_MODES))
    arch = _str_list(path, "build.arch", t.get("arch", []))
    for a in arch:
        if not re.fullmatch(r"\d+\.\d+[af]?", a):
            raise BadInput(f"{path}: `build.arch` entry `{a}` is not an arch like 12.0a, 12.0f, 9.0a")
    install = t.get("install")
    if install is not None:
        install = _str_list(path, "build.install", install)
        for s in install:
            if s not in sources:
                raise BadInput(f"{path}: `build.install` names unknown source `{s}`", hint=_suggest(s, sources))
    cuda = []
    for src, globs in sorted(t.get("cuda", {}).items()):
        if src not in sources:
            raise BadInput(f"{path}: `build.cuda.{src}` names no source", hint=_suggest(src, sources))
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
    )


def _server_spec(path: Path, t: dict) -> ServerSpec:
    args = []
    for flag, value in t.get("args", {}).items():
        if flag.startswith("-"):
            raise BadInput(f"{path}: `server.args` keys are flag names without dashes: `{flag.lstrip('-')}`")
        args.append((flag, tuple(value) if isinstance(value, list) else value))
    return ServerSpec(
        model=t.get("model"),
        args=tuple(args),
        env=tuple(sorted((str(k), str(v)) for k, v in t.get("env", {}).items())),
        timeout_s=float(t.get("timeout_s", 600.0)),
        host=t.get("host", "127.0.0.1"),
        port=t.get("port"),
        gpus=t.get("gpus"),
    )


def _bench_spec(path: Path, t: dict) -> BenchSpec:
    driver = t.get("driver", "serving")
    if driver not in DRIVERS:
        raise BadInput(f"{path}: `benchmark.driver` must be one of {', '.join(DRIVERS)}", hint=_suggest(driver, DRIVERS))
    defaults = BenchSpec()
    kw: dict[str, Any] = {"driver": driver}
    for key in ("input_len", "output_len", "num_prompts", "warmup", "seed", "repeats"):
        if key in t:
            if t[key] < 0 or (key in ("input_len", "output_len", "repeats") and t[key] < 1):
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
        kw["timeout_s"] = float(t["timeout_s"])
    return BenchSpec(**{**defaults.__dict__, **kw})


def _target_spec(path: Path, t: dict | None) -> TargetSpec | None:
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
    return TargetSpec(gpu=t["gpu"], count=count)
