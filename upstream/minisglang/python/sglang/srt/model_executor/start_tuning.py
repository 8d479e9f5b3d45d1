"""The miniature's stand-in for sglang's start-up FlashInfer tuning (model_executor/runner/
flashinfer_autotune.py in sglang 0.5.23), for the contract patchbench reads, not for any speed.

sglang tunes only on a CUDA box; the miniature has nothing to tune. When `SGLANG_MINI_TUNED` names a
FlashInfer result file (AutoTuner.save_configs JSON), the miniature leaves it where sglang leaves its
own and logs sglang's line, per rank (one rank here):

- `SGLANG_FLASHINFER_AUTOTUNE_CACHE` "0" (false): a fresh file under
  $SGLANG_CACHE_DIR/flashinfer/autotune/<version>/<arch>/<key>/runs/rank_tp0_pp0_dp0.<time>.<uuid>.json,
  "... writing fresh result to: PATH";
- otherwise the shared rank_tp0_pp0_dp0.json beside runs/ (kept when it exists: loaded, not tuned),
  "Running FlashInfer autotune with cache: PATH".
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import uuid
from pathlib import Path

logger = logging.getLogger("sglang.srt.model_executor.runner.flashinfer_autotune")

KEY_DIR = ("flashinfer", "autotune", "0.7.2", "sm120", "mini")


def maybe_tune() -> None:
    source = os.environ.get("SGLANG_MINI_TUNED")
    if not source:
        return
    base = Path(os.path.expanduser(os.environ.get("SGLANG_CACHE_DIR", "~/.cache/sglang"))).joinpath(*KEY_DIR)
    cache = base / "rank_tp0_pp0_dp0.json"
    if os.environ.get("SGLANG_FLASHINFER_AUTOTUNE_CACHE", "1").lower() in ("0", "false"):
        stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
        fresh = base / "runs" / f"{cache.stem}.{stamp}.{uuid.uuid4().hex}{cache.suffix}"
        fresh.parent.mkdir(parents=True, exist_ok=True)
        logger.info("Running FlashInfer autotune (cache reuse DISABLED via SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); "
                    "writing fresh result to: %s", fresh)
        shutil.copyfile(source, fresh)
    else:
        base.mkdir(parents=True, exist_ok=True)
        logger.info("Running FlashInfer autotune with cache: %s", cache)
        if not cache.exists():
            shutil.copyfile(source, cache)
    logger.info("FlashInfer autotune completed.")
