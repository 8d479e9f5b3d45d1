"""Server argv from a recipe, and the static config check with the env's own sglang parser.

The check runs before any GPU time is spent: unknown or removed flags for that sglang version are
named, the parsed `ServerArgs` fields are compared with the recipe's `[expect]` and with what the
arguments imply (`ep-size = 8` must yield `ep_size == 8`).
"""

from __future__ import annotations

import difflib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import BadInput, PatchbenchError

PROBE = Path(__file__).resolve().parent / "probes" / "server_args.py"


def recipe_args(server) -> list[str]:
    """The recipe's `[server.args]` as argv: true -> bare flag, false -> omitted, list -> repeated values."""
    argv: list[str] = []
    for flag, value in server.args:
        if value is False or value is None:
            continue
        argv.append(f"--{flag}")
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        else:
            argv.append(str(value))
    return argv


def launch_argv(server, *, host: str, port: int, model: str | None = None) -> list[str]:
    """Arguments after `python -m sglang.launch_server`."""
    argv = []
    model = model or server.model
    if model:
        argv += ["--model-path", model]
    return [*argv, "--host", host, "--port", str(port), *recipe_args(server)]


def _same(expected, actual) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return str(expected).lower() == str(actual).lower()
    if isinstance(expected, (int, float)) or isinstance(actual, (int, float)):
        try:
            return float(expected) == float(actual)
        except (TypeError, ValueError):
            return False
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(_same(e, a) for e, a in zip(expected, actual))
    return str(expected) == str(actual)


def implied_expectations(server, dests: dict[str, str]) -> dict[str, object]:
    """What the arguments imply about the parsed fields: `--ep-size 8` -> ep_size == 8."""
    implied = {}
    for flag, value in server.args:
        dest = dests.get(f"--{flag}")
        if dest is None or value is None:
            continue
        implied[dest] = list(value) if isinstance(value, (list, tuple)) else value
    return implied


def compare_fields(expect: dict, fields: dict, *, source: str) -> list[str]:
    """Mismatches between expectations and observed fields, one message per field."""
    problems = []
    for key, want in expect.items():
        if key not in fields:
            problems.append(f"{source} has no field `{key}` (expected {want!r})")
        elif not _same(want, fields[key]):
            problems.append(f"{key}: expected {want!r}, {source} says {fields[key]!r}")
    return problems


@dataclass
class StaticCheck:
    ok: bool
    version: str | None
    fields: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    resolved: bool = False
    note: str | None = None
    implied: dict = field(default_factory=dict)  # field -> value the recipe's flags imply


def static_check(python: Path, server, expect: dict, *, environ: dict | None = None,
                 model: str | None = None, device: str | None = None, timeout: float = 300) -> StaticCheck:
    """Parse the recipe's server args with the env's sglang; raise BadInput on unknown flags."""
    argv = launch_argv(server, host="127.0.0.1", port=30000, model=model)
    try:
        proc = subprocess.run([str(python), str(PROBE), json.dumps(argv), device or ""], capture_output=True, text=True,
                              env=environ, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PatchbenchError(f"the sglang argument parser did not answer within {timeout:.0f} s") from None
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PatchbenchError(f"the sglang argument probe failed: {' | '.join(tail)}") from None
    version = report.get("version")
    err = report.get("error")
    if err and not report["fields"]:
        if "unrecognized arguments" in err or "ambiguous option" in err or "invalid choice" in err or "expected" in err:
            bad = [a for a in argv if a.startswith("--") and a.split("=")[0] not in report["options"]]
            hint = None
            if bad:
                close = difflib.get_close_matches(bad[0], report["options"], n=1)
                hint = f"did you mean `{close[0]}`?" if close else "removed in this version?"
            raise BadInput(f"sglang {version} does not accept the server arguments: {err}", hint=hint)
        if err.startswith("cannot import"):
            raise PatchbenchError(err)
        raise BadInput(f"sglang {version}: {err}")
    fields = report["fields"]
    implied = implied_expectations(server, report["dests"])
    expected = {**implied, **expect}
    problems = compare_fields(expected, fields, source=f"sglang {version} parser")
    if err:
        problems.insert(0, err)
    note = None if report.get("resolved") else f"defaults not resolved: {report.get('resolve_error')}"
    return StaticCheck(ok=not problems, version=version, fields=fields, problems=problems,
                       resolved=report.get("resolved", False), note=note, implied=implied)
