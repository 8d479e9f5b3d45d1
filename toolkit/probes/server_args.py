"""Parse and resolve server arguments with the env's own sglang, for a declared target; print JSON.

Run as: ENV_PYTHON server_args.py '<json request>' where the request is
`{"argv": [...], "device": "cuda" | "", "target": null | {"name", "capability": [12, 0],
"memory_mib", "count"}}`. Imports nothing from patchbench, so it works in any env with sglang.

Without a target the parser runs and defaults resolve for this machine (a CPU box, usually: they may
not resolve, and the reason is reported). With a target the probe presents that machine to sglang:

1. it imports sglang's resolution modules first, on the CPU path (presenting CUDA before these
   imports makes them load sgl-kernel's CUDA library, which fails without a driver);
2. it answers the `torch.cuda` queries resolution makes (`is_available`, `is_initialized`,
   `device_count`, `current_device`, `get_device_capability`, `get_device_properties`,
   `get_device_name`, `mem_get_info`) and sglang's `nvidia-smi` memory query
   (`utils.common.get_nvgpu_memory_capacity`, which feeds `get_device_memory_capacity`) with the
   target's facts, and clears sglang's cached platform probes so they ask again;
3. where sglang has it (0.5.23: `sglang.srt.runtime_context.override_platform`), it installs the
   platform facts (`is_cuda`, `is_sm120`, `is_blackwell`, `device_sm`, `device_capability`, ...)
   as sglang's own probes compute them for the presented device;
4. `ServerArgs.from_cli_args` then, where present, `resolve_once()`; reports `resolved_dict()`.

Versions that resolve defaults in `ServerArgs.__post_init__` (0.5.10.post1) get steps 1 (the
modules `server_args` imports) and 2 before construction; they have no `override_platform` and
no `resolved_dict`, so the resolved config is every field read back after `__post_init__`. What
is covered there: the device queries above, so memory- and capability-dependent defaults resolve
for the target; not covered: facts a version reads some other way (NVML directly, environment).

Reports: ok, version, fields (parsed, or resolved when resolution ran), resolved_config (resolved
values only), dests (flag -> field), options, resolved (bool), resolve_error (why defaults did not
resolve: never silent), refused (sglang's own refusal of the configuration), error, presented, and
`outcome`: "ok", "refused: <line>", "unresolved: <line>" (resolution raised something that is not
a refusal: the check could not check; `ok` is then false) or "error: <line>".
"""

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import pkgutil
import sys
import traceback
import types

# Exceptions sglang's validation raises to refuse a configuration; anything else that stops
# resolution (a missing driver, a library that cannot load) is the outcome `unresolved`: not a pass.
REFUSALS = (ValueError, AssertionError, NotImplementedError)


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _jsonable(getattr(v, f.name, None)) for f in dataclasses.fields(v)}
    return repr(v)


def _needs_gpu(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(k in text for k in ("nvidia driver", "no cuda gpus", "cuda driver", "libcuda", "cuda is not available",
                                   "torch not compiled with cuda", "nvidia-smi"))


def _where(exc: BaseException) -> str:
    """The innermost sglang frame that raised (module:line), to say whose rule it is."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/sglang/" in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    f = frames[-1]
    path = f.filename.replace("\\", "/")
    return f"{path[path.rfind('/sglang/') + 1:]}:{f.lineno}"


def _preload_resolution_modules() -> list[str]:
    """Import sglang's resolution modules on the CPU path; returns the ones that failed to import."""
    failed = []
    for pkg_name in ("sglang.srt.arg_groups", "sglang.srt.runtime_context", "sglang.srt.utils.common",
                     "sglang.srt.configs.model_config", "sglang.srt.utils.hf_transformers_utils"):
        try:
            pkg = importlib.import_module(pkg_name)
        except Exception as exc:  # noqa: BLE001 - absent in this version, or fails on CPU
            if not isinstance(exc, ModuleNotFoundError):
                failed.append(f"{pkg_name}: {type(exc).__name__}: {exc}")
            continue
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []) or [], prefix=pkg_name + "."):
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001
                failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
    return failed


def _clear_sglang_caches() -> None:
    """sglang caches its platform probes (functools.lru_cache): make them ask again."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sglang.") or mod is None:
            continue
        for value in list(vars(mod).values()):
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                with contextlib.suppress(Exception):
                    value.cache_clear()


def _present_torch_cuda(target: dict) -> bool:
    """Answer the torch.cuda device queries sglang's resolution makes with the target's facts.
    False when the env has no torch (the miniature): nothing to present there."""
    try:
        import torch
    except ImportError:
        return False

    major, minor = (int(x) for x in target["capability"])
    total = int(target["memory_mib"]) * (1 << 20)
    count = int(target["count"])
    props = types.SimpleNamespace(name=target["name"], major=major, minor=minor, total_memory=total,
                                  multi_processor_count=int(target.get("sm_count") or 0) or None,
                                  is_integrated=False, is_multi_gpu_board=False)
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.is_initialized = lambda: True
    cuda.device_count = lambda: count
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_properties = lambda device=None: props
    cuda.get_device_name = lambda device=None: target["name"]
    cuda.mem_get_info = lambda device=None: (total, total)
    if not getattr(torch.version, "cuda", None):
        torch.version.cuda = str(target.get("cuda") or "12.8")  # a CPU build of torch: say which CUDA
    common = sys.modules.get("sglang.srt.utils.common")
    if common is not None and hasattr(common, "get_nvgpu_memory_capacity"):
        common.get_nvgpu_memory_capacity = lambda: float(target["memory_mib"])  # nvidia-smi's answer
    return True


def _present_platform(target: dict) -> dict:
    """Install the platform facts, as sglang's own probes compute them for the presented device."""
    try:
        rc = importlib.import_module("sglang.srt.runtime_context")
    except Exception:  # noqa: BLE001 - a version without the platform context (0.5.10)
        return {}
    probes = {**getattr(rc, "_PLATFORM_PROBES", {}), **getattr(rc, "_PLATFORM_VALUES", {})}
    if not probes or not hasattr(rc, "override_platform"):
        return {}
    common = importlib.import_module("sglang.srt.utils.common")
    facts = {}
    for fact, probe in probes.items():
        fn = getattr(common, probe, None)
        if fn is None:
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                facts[fact] = fn()
        except Exception:  # noqa: BLE001 - a probe that needs more than the device queries
            continue
    major, minor = (int(x) for x in target["capability"])
    facts.update(is_cuda=True, is_hip=False, device_sm=major * 10 + minor, device_capability=(major, minor))
    facts = {k: v for k, v in facts.items() if k in probes}
    rc.override_platform(**facts).install()
    return facts


def _read_back(args, dests: dict, ns=None) -> dict:
    """Every public field of the ServerArgs, then every parser destination: read back from the
    object (0.5.23 keeps values behind properties), else as parsed (0.5.10 parses `--tp-size` into
    `tensor_parallel_size` and stores it as `tp_size`: the flag's own dest still says what it set)."""
    names = [f.name for f in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    names += [d for d in dests.values() if d not in names]
    parsed = vars(ns) if ns is not None else {}
    fields = {}
    for name in names:
        if name.startswith("_"):
            continue
        try:
            fields[name] = _jsonable(getattr(args, name))
        except Exception:  # noqa: BLE001 - a property that needs a GPU, say
            if name in parsed:
                fields[name] = _jsonable(parsed[name])
    return fields


def main() -> int:
    req = json.loads(sys.argv[1])
    if isinstance(req, list):  # the older calling convention: argv list, then the device
        req = {"argv": req, "device": sys.argv[2] if len(sys.argv) > 2 else ""}
    argv, device, target = list(req.get("argv", [])), req.get("device") or "", req.get("target")
    out = {"ok": False, "fields": {}, "resolved_config": {}, "dests": {}, "options": [], "resolved": False,
           "resolve_error": None, "refused": None, "error": None, "presented": None, "outcome": None}
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs

        out["version"] = getattr(sglang, "__version__", None)
    except Exception as exc:  # noqa: BLE001 - report whatever the env's import raises
        out["error"] = f"cannot import sglang.srt.server_args: {type(exc).__name__}: {exc}"
        print(json.dumps(_with_outcome(out)))
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
        print(json.dumps(_with_outcome(out)))
        return 0
    if target:
        preload_failures = _preload_resolution_modules()
        torch_presented = _present_torch_cuda(target)
        _clear_sglang_caches()
        facts = _present_platform(target)
        out["presented"] = {"target": target, "torch_cuda": torch_presented, "platform": _jsonable(facts),
                            "preload_failures": preload_failures[:5]}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = ServerArgs.from_cli_args(ns)
    except Exception as exc:  # noqa: BLE001
        out["fields"] = {k: _jsonable(v) for k, v in vars(ns).items()}
        _classify(out, exc, target)
        print(json.dumps(_with_outcome(out)))
        return 0
    resolve = getattr(args, "resolve_once", None)
    if callable(resolve):
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                resolve()
            out["resolved"] = True
        except Exception as exc:  # noqa: BLE001
            _classify(out, exc, target)
    else:
        out["resolved"] = True  # defaults resolve in __post_init__ on these versions
    fields = _read_back(args, out["dests"], ns)
    if out["resolved"]:
        resolved = getattr(args, "resolved_dict", None)
        try:
            out["resolved_config"] = _jsonable(resolved()) if callable(resolved) else dict(fields)
        except Exception as exc:  # noqa: BLE001
            out["resolve_error"] = f"resolved_dict() failed: {type(exc).__name__}: {exc}"
            out["resolved"] = False
        fields.update(out["resolved_config"])
    out["fields"] = fields
    out["ok"] = out["refused"] is None and out["resolve_error"] is None
    print(json.dumps(_with_outcome(out)))
    return 0


def _with_outcome(out: dict) -> dict:
    """One word and its reason: ok, refused, unresolved (the check could not check) or error."""
    if out["refused"]:
        out["outcome"] = f"refused: {out['refused']}"
    elif out["error"]:
        out["outcome"] = f"error: {out['error']}"
    elif out["resolve_error"] or not out["resolved"]:
        out["outcome"] = f"unresolved: {out['resolve_error'] or 'no reason reported'}"
    else:
        out["outcome"] = "ok"
    return out


def _classify(out: dict, exc: BaseException, target) -> None:
    """sglang refused the configuration, or could not resolve it here (say why, either way)."""
    where = _where(exc)
    text = f"{type(exc).__name__}: {exc}" + (f" [{where}]" if where else "")
    if isinstance(exc, REFUSALS) and not _needs_gpu(exc):
        out["refused"] = text
    else:
        out["resolve_error"] = text


if __name__ == "__main__":
    sys.exit(main())
