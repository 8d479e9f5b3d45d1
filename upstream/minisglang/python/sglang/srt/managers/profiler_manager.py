"""`/start_profile` and `/stop_profile` for the miniature: a real torch profiler over forward steps.

As sglang 0.5.23's scheduler behaves: a `ProfileReq` configures the profiler and `/start_profile`
answers at once, before any step is recorded. Recording starts with the next forward step (or at
`start_step`); each forward step is a `step[DECODE bs=B]` / `step[EXTEND bs=B toks=N]` span. With
`num_steps`, once that many steps are recorded the next forward step stops the profiler before it
runs (sglang checks its target at the start of a batch, so an idle server writes nothing until a
step comes or `/stop_profile` is called) and writes
`{output_dir}/{profile_prefix-}{profile_id}-TP-0.trace.json.gz` (Chrome trace JSON, gzipped);
profiling is then over, and `/stop_profile` fails as when nothing was started. torch is imported
only here, only when asked.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import List, Optional

from sglang.srt.managers.io_struct import ProfileReq

logger = logging.getLogger("sglang.srt.managers.profiler_manager")


class ProfileError(Exception):
    """A profile the miniature cannot record (its own limits): a 400 with the message."""


class ProfileStateError(ProfileError):
    """sglang's scheduler refusing the request (already / not in progress): sglang raises it in the
    HTTP handler, so the client gets a 500 and the message goes to the server log."""


class ProfilerManager:
    def __init__(self, tp_size: int = 1):
        self.tp_size = tp_size  # one process here; sglang writes one trace per TP rank
        self.req: Optional[ProfileReq] = None
        self.profiler = None
        self.forward_ct = 0
        self.start_at: Optional[int] = None
        self.target: Optional[int] = None
        self.counted = 0
        self.span = None
        self.last_paths: List[str] = []

    @property
    def in_progress(self) -> bool:
        return self.req is not None

    def configure(self, req: ProfileReq) -> None:
        """Arm the profiler and return: the caller is answered before any step is recorded."""
        if self.in_progress:
            raise ProfileStateError("Profiling is already in progress. Call /stop_profile first.")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ProfileError("torch is not installed in this environment: the miniature's profiler "
                               "records a torch profiler trace (install torch, see --mini-torch-step)")
        acts = req.activities or ["CPU", "GPU"]
        if "RPD" in acts:
            raise ProfileError("RPD (rocm profile data) is not available in the miniature")
        req.activities = acts
        req.output_dir = req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        req.profile_id = req.profile_id or str(time.time())
        self.req = req
        self.counted = 0
        self.start_at = max(req.start_step, self.forward_ct + 1) if req.start_step else self.forward_ct + 1
        self.target = req.num_steps or None
        logger.info("Profiling armed: start at forward step %d, %s steps, activities %s, output %s",
                    self.start_at, self.target or "until /stop_profile", acts, req.output_dir)

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] if "CPU" in self.req.activities else []
        if "GPU" in self.req.activities:
            if torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
            else:
                logger.info("Profiling: GPU activity asked for, but no CUDA device: CPU only")
        if not acts:
            acts = [ProfilerActivity.CPU]
        self.profiler = profile(activities=acts, record_shapes=bool(self.req.record_shapes),
                                with_stack=bool(self.req.with_stack),
                                profile_memory="MEM" in self.req.activities)
        self.profiler.start()
        logger.info("Profiling starts at forward step %d", self.forward_ct)

    def begin_step(self, kind: str, batch: int, tokens: int) -> None:
        """Before a forward step (`kind` "prefill" or "decode")."""
        self.forward_ct += 1
        if self.req is None:
            return
        if self.target and self.profiler is not None and self.counted >= self.target:
            self.stop()  # the target is checked when the next step begins, as sglang does
            return
        if self.profiler is None and self.forward_ct >= self.start_at:
            self._start()
        if self.profiler is not None:
            import torch

            name = f"step[DECODE bs={batch}]" if kind == "decode" else f"step[EXTEND bs={batch} toks={tokens}]"
            self.span = torch.profiler.record_function(name)
            self.span.__enter__()

    def end_step(self, kind: str) -> None:
        if self.span is not None:
            self.span.__exit__(None, None, None)
            self.span = None
        if self.profiler is None:
            return
        if not self.req.profile_by_stage or kind == "decode":
            self.counted += 1

    def stop(self) -> List[str]:
        """Write the trace and disarm; raises ProfileError when nothing is in progress."""
        if self.req is None:
            raise ProfileStateError("Profiling is not in progress. Call /start_profile first.")
        req, prof = self.req, self.profiler
        self.req, self.profiler = None, None
        paths: List[str] = []
        if prof is not None:
            prof.stop()
            os.makedirs(req.output_dir, exist_ok=True)
            prefix = f"{req.profile_prefix}-" if req.profile_prefix else ""
            suffix = "-DECODE" if req.profile_by_stage else ""
            for rank in range(self.tp_size):
                path = os.path.join(req.output_dir, f"{prefix}{req.profile_id}-TP-{rank}{suffix}.trace.json.gz")
                if paths:
                    shutil.copyfile(paths[0], path)  # the one process's trace, under each rank's name
                else:
                    prof.export_chrome_trace(path)
                paths.append(path)
            logger.info("Profiling done. Traces are saved to: %s (%d steps)", req.output_dir, self.counted)
        self.last_paths = paths
        return paths
