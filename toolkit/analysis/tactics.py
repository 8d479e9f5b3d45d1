"""Which FlashInfer tactics the runs' launches chose, side by side (pure).

Each run stores its launch's autotuner choices (toolkit.run.autotune_record: one per tuned op,
shapes and extras). Two things a performance engineer asks of them:

- did the variant's server run other kernels than the baseline's at the same shapes (a patch that
  adds a tile shows up here as the autotuner picking it, or not picking it anywhere)?
- did the launches of one configuration choose alike? A shape whose winner changes from launch to
  launch is a close race: its launches run different kernels, and that is part of the configuration's
  launch-to-launch spread (each patchbench launch tunes afresh, so the spread includes it).

A recipe's choice at a shape is the one most of its launches made (ties: the earliest launch's).
No verdict and no error rate: these are records of what ran, not estimates.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Mapping, Sequence

LISTED = 4  # differences named in one line (the rest counted)


def _key(c: Mapping) -> tuple[str, str, str]:
    return (c["op"], json.dumps(c.get("shapes")), json.dumps(c.get("extras")))


def _tactic(c: Mapping) -> str:
    return json.dumps([c.get("runner"), c.get("tactic")])


def table(extra: Mapping | None) -> dict | None:
    """{(op, shapes, extras): "[runner, tactic]"} of one run's stored record, or None without one."""
    rec = (extra or {}).get("autotune")
    if not rec or not rec.get("choices"):
        return None
    return {_key(c): _tactic(c) for c in rec["choices"]}


def shape_text(key: tuple[str, str, str]) -> str:
    """"trtllm::fused_moe::gemm1 at 8x6144" (the op and its first tuned input's shape)."""
    shapes = json.loads(key[1])
    first = shapes[0] if isinstance(shapes, list) and shapes and isinstance(shapes[0], list) else shapes
    dims = "x".join(str(d) for d in first) if isinstance(first, list) else str(first)
    return f"{key[0]} at {dims}"


def tactic_text(tactic: str) -> str:
    runner, t = json.loads(tactic)
    return f"{json.dumps(t)}" if runner is None else f"{runner} {json.dumps(t)}"


def modal(tables: Sequence[dict]) -> dict:
    """Per key, the choice most launches made (ties: the earliest's)."""
    out: dict = {}
    for key in dict.fromkeys(k for t in tables for k in t):
        seen = [t[key] for t in tables if key in t]
        counts = Counter(seen)
        out[key] = max(seen, key=lambda c: (counts[c], -seen.index(c)))
    return out


def varied(tables: Sequence[dict]) -> dict:
    """{key: Counter of choices} where the launches did not all choose alike."""
    out = {}
    for key in dict.fromkeys(k for t in tables for k in t):
        counts = Counter(t[key] for t in tables if key in t)
        if len(counts) > 1:
            out[key] = counts
    return out


def differences(a: dict, b: dict) -> dict:
    """{key: (a's choice, b's choice)} at the keys both tuned and chose differently."""
    return {k: (a[k], b[k]) for k in a if k in b and a[k] != b[k]}


def _listed(items: list[str]) -> str:
    more = len(items) - LISTED
    return "; ".join(items[:LISTED]) + (f"; ... ({more} more)" if more > 0 else "")


def lines(runs_by_recipe: Mapping[str, Sequence], base: str | None = None) -> list[str]:
    """The lines `compare` prints (no lines when no run stores tactics: nothing tuned, e.g. a CPU
    box). `runs_by_recipe`: each recipe's runs (objects with `.extra`); `base`: the reference
    (default: the first recipe)."""
    tables = {name: [t for t in (table(r.extra) for r in runs) if t] for name, runs in runs_by_recipe.items()}
    if not any(tables.values()):
        return []
    reused = {name for name, runs in runs_by_recipe.items()
              if any(((r.extra or {}).get("autotune") or {}).get("mode") == "reused" for r in runs)}
    out = []
    for name, ts in tables.items():
        if not ts:
            out.append(f"{name}: no tactics stored (its launches tuned nothing, or on another box)")
            continue
        if name in reused:
            out.append(f"{name}: tactics from a reused cache (the recipe's SGLANG_FLASHINFER_AUTOTUNE_CACHE): its "
                       "launches after the first ran earlier winners unmeasured, so they agree by construction")
        shapes = len(set().union(*ts))
        var = varied(ts)
        if len(ts) > 1 and var:
            items = [f"{shape_text(k)}: " + ", ".join(f"{tactic_text(c)} in {n}" for c, n in cnt.most_common())
                     for k, cnt in var.items()]
            out.append(f"{name}: its {len(ts)} launches chose differently at {len(var)} of {shapes} tuned shapes "
                       f"(close races; part of its launch-to-launch spread): {_listed(items)}")
        else:
            out.append(f"{name}: {shapes} tuned shapes" + (f", the same tactics in all {len(ts)} launches"
                                                           if len(ts) > 1 else " (one launch)"))
    base = base or next(iter(tables))
    ref = modal(tables.get(base) or [])
    for name, ts in tables.items():
        if name == base or not ts or not ref:
            continue
        mine = modal(ts)
        diff = differences(ref, mine)
        both = len([k for k in ref if k in mine])
        rebuilt = _flashinfer(runs_by_recipe.get(base) or ()) != _flashinfer(runs_by_recipe[name])
        caveat = ("; FlashInfer differs between them: a tactic is an index into its build's candidate list, so "
                  "a patch that changes the list can give one id to different kernels" if rebuilt else "")
        if diff:
            items = [f"{shape_text(k)}: {tactic_text(x)} -> {tactic_text(y)}" for k, (x, y) in diff.items()]
            out.append(f"{base} -> {name}: different tactics at {len(diff)} of {both} shapes both tuned: "
                       f"{_listed(items)}{caveat}")
        else:
            out.append(f"{base} -> {name}: the same tactics at all {both} shapes both tuned{caveat}")
    return out


def _flashinfer(runs: Sequence) -> set:
    """The FlashInfer trees (hash or version) the runs were built from."""
    return {(getattr(r, "tree_hashes", None) or {}).get("flashinfer") or getattr(r, "flashinfer_version", None)
            for r in runs}
