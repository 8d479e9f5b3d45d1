"""Probe run by an env's own interpreter: which fields its sglang's ProfileReq (the body of
POST /start_profile) accepts. Prints one JSON object: {"fields": [...], "version": "..."}, or
{"fields": null, "error": "..."} when the class cannot be found."""

import dataclasses
import json
import sys


def main() -> int:
    out = {"fields": None}
    try:
        import sglang

        out["version"] = getattr(sglang, "__version__", None)
        from sglang.srt.managers.io_struct import ProfileReq
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out))
        return 0
    names = None
    if dataclasses.is_dataclass(ProfileReq):
        names = [f.name for f in dataclasses.fields(ProfileReq)]
    elif hasattr(ProfileReq, "__struct_fields__"):  # msgspec structs
        names = list(ProfileReq.__struct_fields__)
    elif hasattr(ProfileReq, "model_fields"):  # pydantic
        names = list(ProfileReq.model_fields)
    else:
        names = list(getattr(ProfileReq, "__annotations__", {}))
    out["fields"] = [n for n in names if n not in ("req_type", "rid", "http_worker_ipc")]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
