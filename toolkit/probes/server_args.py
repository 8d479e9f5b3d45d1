"""Parse server arguments with the env's own sglang parser; print one JSON object.

Run as: ENV_PYTHON server_args.py '<json list of argv>'. Imports nothing from patchbench, so it
works in any env that has sglang. Reports: ok, fields (the parsed ServerArgs), dests (flag -> field),
options (every flag the parser knows), resolved (whether post-init defaults were resolved), error.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import sys


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def _needs_gpu(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(k in text for k in ("nvidia driver", "no cuda gpus", "cuda driver", "libcuda", "cuda is not available",
                                   "torch not compiled with cuda"))


def main() -> int:
    argv = json.loads(sys.argv[1])
    device = sys.argv[2] if len(sys.argv) > 2 else ""
    out = {"ok": False, "fields": {}, "dests": {}, "options": [], "resolved": False, "error": None}
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs

        out["version"] = getattr(sglang, "__version__", None)
    except Exception as exc:  # noqa: BLE001 - report whatever the env's import raises
        out["error"] = f"cannot import sglang.srt.server_args: {type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return 0
    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    out["options"] = sorted(s for a in parser._actions for s in a.option_strings)
    out["dests"] = {s: a.dest for a in parser._actions for s in a.option_strings}
    if device and "--device" in out["options"] and "--device" not in argv:
        argv = [*argv, "--device", device]  # defaults that depend on the device resolve for it
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        msg = str(exc) if isinstance(exc, argparse.ArgumentError) else err.getvalue().strip().splitlines()[-1:]
        out["error"] = msg if isinstance(msg, str) else (msg[0] if msg else "argument error")
        print(json.dumps(out))
        return 0
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = ServerArgs.from_cli_args(ns)
    except Exception as exc:  # noqa: BLE001
        out["fields"] = {k: _jsonable(v) for k, v in vars(ns).items()}
        if _needs_gpu(exc):
            # Versions that resolve defaults in __post_init__ (0.5.10) ask the GPU there: the
            # parsed values are still what the flags say; defaults stay unresolved.
            out["ok"] = True
            out["resolve_error"] = f"{type(exc).__name__}: {exc}"
        else:
            out["error"] = f"ServerArgs rejected the arguments: {type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return 0
    resolve = getattr(args, "resolve_once", None)
    if callable(resolve):
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                resolve()
            out["resolved"] = True
        except Exception as exc:  # noqa: BLE001
            out["resolve_error"] = f"{type(exc).__name__}: {exc}"
    else:
        out["resolved"] = True  # defaults resolve in __post_init__ on these versions
    # Every public dataclass field, then every parser destination read back from the object (from
    # 0.5.23 on, ServerArgs keeps its values behind properties, not dataclass fields).
    names = [f.name for f in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    names += [d for d in out["dests"].values() if d not in names]
    fields = {}
    for name in names:
        if name.startswith("_"):
            continue
        try:
            fields[name] = _jsonable(getattr(args, name))
        except Exception:  # noqa: BLE001 - a property that needs a GPU, say
            continue
    out["fields"] = fields
    out["ok"] = True
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
