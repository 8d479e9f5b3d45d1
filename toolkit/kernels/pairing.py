"""Which kernel records may be compared with each other (pure).

A per-shape speedup says something about two builds only when both tables were timed under the same
conditions: on the same GPUs (the GPU key the record's machine stored) and with the same trial
settings (warmup, iterations, trials, L2 flush, seed, device, FlashInfer autotuning, CUDA-graph replay). Each recipe is represented by its
current build as far as the records know: the env key of its newest record of that op and backend
(an older env key is a build the recipe no longer has). Between the baseline and a candidate the env
keys differ by design: that is what is compared.

`pair(base, records)` picks, among a candidate's records of the baseline's (op, backend), the newest
of its newest env key timed under the baseline's conditions; when none is, nothing is compared and
`Pair.differs` says what differed from the candidate's newest record. No faster/slower verdict is
ever given between records of different GPU keys or trial settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# how a record was timed: a tuned table against an untuned one, or graph replays against eager calls (whose
# Python dispatch is in the timed region), would give a speedup that is the timing method's, not the build's
SETTINGS = ("warmup", "iters", "trials", "flush_mb", "seed", "device", "autotune", "cuda_graph")


def gpu_key(record: dict) -> str:
    """The GPUs a record was timed on, as runs store them ('1x NVIDIA H200', 'none' for CPU only)."""
    return str((record.get("machine") or {}).get("gpu_key") or "unknown")


def differences(a: dict, b: dict) -> list[str]:
    """How the conditions of record `b` differ from `a`'s ("GPU key 1x H200 vs 1x B200",
    "trials 5 vs 10"); [] when they may be compared."""
    out = []
    if gpu_key(a) != gpu_key(b):
        out.append(f"GPU key {gpu_key(a)} vs {gpu_key(b)}")
    sa, sb = a.get("settings") or {}, b.get("settings") or {}
    out += [f"{k} {sa.get(k)} vs {sb.get(k)}" for k in SETTINGS if sa.get(k) != sb.get(k)]
    return out


@dataclass(frozen=True)
class Pair:
    base: dict
    cand: dict | None  # None: nothing of the candidate was timed under the baseline's conditions
    differs: list = field(default_factory=list)  # with cand None: how the candidate's newest record differs
    notes: list = field(default_factory=list)  # newer records of the candidate left out, and why


def pair(base: dict, records: list[dict]) -> Pair:
    """The candidate record to compare with `base` among `records` (the candidate's records of the
    same op and backend, oldest first; see the module doc)."""
    if not records:
        return Pair(base, None, ["no record"])
    newest = records[-1]
    current = [r for r in records if r.get("env_key") == newest.get("env_key")]
    same = [r for r in current if not differences(base, r)]
    if not same:
        return Pair(base, None, differences(base, newest))
    chosen = same[-1]
    notes = []
    if chosen is not newest:
        notes.append(f"newer record {newest.get('id')} left out: {', '.join(differences(base, newest))}")
    return Pair(base, chosen, [], notes)


def not_compared(name: str, base_name: str, p: Pair) -> str:
    """One line for a pair that was not compared."""
    b = p.base
    return (f"{name} against {base_name}: {b['op']} ({b.get('backend')}) not compared, no speedup stated: "
            f"{'; '.join(p.differs)} (baseline record {b.get('id')})")
