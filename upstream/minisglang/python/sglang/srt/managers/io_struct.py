"""Request structs the miniature shares with sglang (`sglang/srt/managers/io_struct.py`).

Only `ProfileReq` lives here: the body of `POST /start_profile`, with sglang 0.5.23's fields, so a
client can ask the installed package which fields its release accepts (dataclass fields here).
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import List, Optional

ACTIVITIES = ("CPU", "GPU", "MEM", "RPD")


class ProfileReqType(Enum):
    START_PROFILE = 1
    STOP_PROFILE = 2


@dataclasses.dataclass
class ProfileReq:
    output_dir: Optional[str] = None
    start_step: Optional[int] = None
    num_steps: Optional[int] = None  # stop by itself after this many steps
    activities: Optional[List[str]] = None  # from ACTIVITIES; default CPU + GPU
    profile_by_stage: bool = False
    with_stack: Optional[bool] = None
    record_shapes: Optional[bool] = None
    profile_id: Optional[str] = None
    merge_profiles: bool = False
    profile_prefix: Optional[str] = None
    profile_stages: Optional[List[str]] = None
    detailed_annotations: bool = False
    req_type: ProfileReqType = ProfileReqType.START_PROFILE

    @classmethod
    def from_json(cls, obj: dict) -> "ProfileReq":
        """Build from a JSON body; unknown fields or bad activities raise ValueError."""
        names = {f.name for f in dataclasses.fields(cls)} - {"req_type"}
        unknown = sorted(set(obj) - names)
        if unknown:
            raise ValueError(f"unknown ProfileReq field(s): {', '.join(unknown)}")
        req = cls(**obj)
        bad = [a for a in (req.activities or []) if a not in ACTIVITIES]
        if bad:
            raise ValueError(f"unknown activities {bad}; choose from {list(ACTIVITIES)}")
        for name in ("start_step", "num_steps"):
            value = getattr(req, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative integer")
        return req
