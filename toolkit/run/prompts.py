"""The output check's prompt files: JSONL, one `{"prompt": "...", "id": "..."}` object a line (pure
reading; a malformed line is a BadInput naming the file and the line)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import BadInput


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    kind: str = ""


def load_prompts(path: Path) -> list[Prompt]:
    """Every prompt of `path`; BadInput for an unreadable file, a line that is not a JSON object
    with a non-empty string `prompt`, a repeated id or prompt, or an empty file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the prompts file ({exc})") from None
    out: list[Prompt] = []
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BadInput(f"{path}:{no}: not a JSON object ({exc.args[0] if exc.args else exc})",
                           hint='each line is {"prompt": "...", "id": "..."}') from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
            raise BadInput(f"{path}:{no}: needs a non-empty string `prompt`",
                           hint='each line is {"prompt": "...", "id": "..."}')
        pid = str(obj.get("id", no))
        if pid in seen_ids:
            raise BadInput(f"{path}:{no}: id {pid!r} appears twice")
        if obj["prompt"] in seen_text:
            raise BadInput(f"{path}:{no}: the same prompt appears twice (identical outputs of different "
                           "prompts count as degenerate)")
        seen_ids.add(pid)
        seen_text.add(obj["prompt"])
        out.append(Prompt(pid, obj["prompt"], str(obj.get("kind", ""))))
    if not out:
        raise BadInput(f"{path}: no prompts")
    return out


def take(prompts: list[Prompt], count: int | None) -> list[Prompt]:
    """The first `count` prompts taken in turn from each kind, in file order (all when None or more
    than there are): a smaller check keeps the set's mix of arithmetic, code, facts, instructions."""
    if count is None or count >= len(prompts):
        return list(prompts)
    by_kind: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_kind.setdefault(p.kind, []).append(p)
    chosen: set[str] = set()
    queues = [list(q) for q in by_kind.values()]
    while len(chosen) < count:
        for q in queues:
            if q and len(chosen) < count:
                chosen.add(q.pop(0).id)
    return [p for p in prompts if p.id in chosen]


def digest(prompts: list[Prompt]) -> str:
    """What must match for two runs' outputs to be compared prompt by prompt."""
    return hashlib.sha256(json.dumps([[p.id, p.prompt] for p in prompts]).encode()).hexdigest()[:16]
