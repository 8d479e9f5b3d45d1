r"""A recipe's `[matrix]`: lists of settings expand to named variants, each an ordinary Recipe (pure).

```toml
[matrix]
server.args.moe-runner-backend = ["cutlass", "flashinfer_cutlass"]   # dotted keys: the recipe key
server.env.SGLANG_ENABLE_SPEC_V2 = ["0", "1"]
benchmark.output_len = [128, 512]
patches.sglang = [[], ["sglang/oea-topk.patch"]]   # patch sets appended to the recipe's stack
exclude = [{ moe-runner-backend = "cutlass", output_len = 512 }]        # drop matching combinations
include = [{ moe-runner-backend = "triton", SGLANG_ENABLE_SPEC_V2 = "0" }]  # add (or extend) some
```

Axes are `server.args.FLAG`, `server.env.VAR`, `benchmark.FIELD` and `patches.SOURCE`, each a
non-empty list. The combinations are the cross product in declaration order; `exclude` drops every
combination matching all of an entry's keys; `include` works as in CI matrices: an entry whose axis
values match existing combinations adds its other keys to them (an entry without axis keys, to every
combination), else it is a combination of its own.
Entries name keys in full (`server.args.X`) or by their last part (`X`) when that is unambiguous.

A variant is named `NAME[k=v,k2=v2]` (keys by their short label, in axis order, then the keys an
include added) and is a full Recipe: its own name, so its runs are its own, and no `[matrix]`.
`toolkit.recipe.load` builds the variants (`expand_recipe`) and loads `NAME[k=v,...]` by expanding
NAME's matrix, so every verb that takes a recipe name takes a variant name.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput

AXIS_PREFIXES = ("server.args.", "server.env.", "benchmark.", "patches.")
_VARIANT = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<body>.*)\]$")


@dataclass(frozen=True)
class Variant:
    """One combination: its name and the values it sets (full dotted key -> value)."""

    name: str
    base: str
    settings: tuple[tuple[str, Any], ...]

    def label(self) -> str:
        return self.name[len(self.base):]


def split_variant(ref: str) -> tuple[str, str | None]:
    """`NAME[k=v,...]` -> (NAME, "k=v,..."); a plain name -> (name, None)."""
    m = _VARIANT.match(str(ref))
    return (m.group("base"), m.group("body")) if m else (str(ref), None)


def _flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _bench_fields() -> tuple[str, ...]:
    from toolkit.recipe.schema import BenchTable

    return tuple(BenchTable.model_fields)


def check_key(key: str, where: str) -> None:
    """BadInput unless `key` is a key a matrix may vary."""
    if key.startswith("benchmark.") and key.split(".", 1)[1] in _bench_fields():
        return
    if key.startswith(("server.args.", "server.env.", "patches.")) and key.count(".") >= 2 - key.startswith("patches."):
        if key.split(".")[-1]:
            return
    raise BadInput(f"{where}: `{key}` is not a recipe key a matrix can vary",
                   hint="matrix keys are server.args.FLAG, server.env.VAR, benchmark.FIELD "
                        f"({', '.join(_bench_fields())}) or patches.SOURCE")


def axes_of(matrix: dict, where: str) -> dict[str, list]:
    """The matrix table -> {full dotted key: values}, checked (known key, non-empty list)."""
    axes: dict[str, list] = {}
    for key, values in _flatten({k: v for k, v in matrix.items() if k not in ("include", "exclude")}).items():
        check_key(key, where)
        if not isinstance(values, list):
            raise BadInput(f"{where}: matrix key `{key}` must be a list of values, not {type(values).__name__}")
        if not values:
            raise BadInput(f"{where}: matrix key `{key}` is an empty list", hint="give at least one value")
        if key.startswith("patches.") and not all(isinstance(v, list) for v in values):
            raise BadInput(f"{where}: matrix key `{key}` must list patch sets (lists), e.g. [[], [\"a.patch\"]]")
        axes[key] = values
    return axes


def _labels(keys: list[str]) -> dict[str, str]:
    """Short label per key: its last part, or the whole key when two keys share a last part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def _resolve_entry_key(key: str, known: list[str], where: str) -> str:
    if key in known or "." in key:
        if "." in key:
            check_key(key, where)
        return key
    hits = [k for k in known if k.rsplit(".", 1)[-1] == key]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise BadInput(f"{where}: `{key}` is ambiguous ({', '.join(hits)}): write the full key")
    raise BadInput(f"{where}: `{key}` is not a matrix axis", hint=f"axes: {', '.join(known) or 'none'}; "
                   "a new key needs its full name (server.args.X, server.env.Y, benchmark.Z)")


def _entries(matrix: dict, which: str, axes: list[str], where: str) -> list[dict[str, Any]]:
    raw = matrix.get(which, [])
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise BadInput(f"{where}: matrix `{which}` must be a list of tables")
    out = []
    for entry in raw:
        flat = _flatten(entry)
        if not flat:
            raise BadInput(f"{where}: matrix `{which}` has an empty table")
        out.append({_resolve_entry_key(k, axes, f"{where}: matrix {which}"): v for k, v in flat.items()})
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, list):  # a patch set
        return "+".join(Path(str(p)).stem for p in value) or "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def expand(base: str, matrix: dict, where: str) -> list[Variant]:
    """The variants of recipe `base`'s matrix (see the module docstring), in a stable order."""
    axes = axes_of(matrix, where)
    keys = list(axes)
    excludes = _entries(matrix, "exclude", keys, where)
    includes = _entries(matrix, "include", keys, where)
    combos: list[dict[str, Any]] = [dict(zip(keys, values)) for values in itertools.product(*axes.values())] \
        if keys else []
    combos = [c for c in combos if not any(all(c.get(k) == v for k, v in e.items()) for e in excludes)]
    extra_keys: list[str] = []
    for entry in includes:
        on_axes = {k: v for k, v in entry.items() if k in axes}
        others = {k: v for k, v in entry.items() if k not in axes}
        matched = False
        if others:  # added to every combination it matches (no axis keys: to all), as CI matrices do
            for c in combos:
                if all(c.get(k) == v for k, v in on_axes.items()) and not any(k in c for k in others):
                    c.update(others)
                    matched = True
        if not matched:
            combos.append(dict(entry))
        extra_keys += [k for k in others if k not in extra_keys]
    labels = _labels(keys + extra_keys)
    variants, seen = [], set()
    for c in combos:
        ordered = [(k, c[k]) for k in keys + extra_keys if k in c]
        name = f"{base}[{','.join(f'{labels[k]}={_fmt(v)}' for k, v in ordered)}]"
        if name in seen:
            continue
        seen.add(name)
        variants.append(Variant(name, base, tuple(ordered)))
    return variants


def apply_settings(raw: dict, settings: tuple[tuple[str, Any], ...]) -> dict:
    """The recipe's merged table with a variant's settings applied and no `[matrix]`."""
    out = {k: v for k, v in raw.items() if k != "matrix"}
    for key, value in settings:
        if key.startswith("patches."):
            src = key.split(".", 1)[1]
            patches = {k: list(v) for k, v in out.get("patches", {}).items()}
            stack = patches.get(src, [])
            patches[src] = stack + [p for p in value if p not in stack]
            out["patches"] = patches
            continue
        parts = key.split(".")
        if parts[0] == "server":
            server = dict(out.get("server", {}))
            table = dict(server.get(parts[1], {}))
            table[".".join(parts[2:])] = value
            server[parts[1]] = table
            out["server"] = server
        else:
            out["benchmark"] = {**out.get("benchmark", {}), parts[1]: value}
    return out


def validate_settings(path: Path, settings: tuple[tuple[str, Any], ...]) -> None:
    """Type-check a variant's values with the recipe file schema (one-line BadInput naming the key)."""
    from toolkit.recipe.schema import validate_file

    validate_file(path, apply_settings({}, settings))


def variants_of(recipe) -> list[Variant]:
    """The expansion of a loaded recipe's `[matrix]` ([] when it has none)."""
    matrix = recipe.raw.get("matrix")
    if not matrix:
        return []
    return expand(recipe.name, matrix, str(recipe.path))
