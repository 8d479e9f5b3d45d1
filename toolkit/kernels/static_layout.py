"""The parallel layout `kernels` configures the timed call at (bench.server_kernel_config) and
`kernels --shapes model` derives expert shapes at: sglang's static resolution of
the recipe's arguments in the recipe's env, as a one-batch run takes it (no server is launched, so no
/server_info; toolkit.run.check_cache, the `check` step's cached outcome). sglang resolves layout
fields the flags do not say: 0.5.23 sets ep_size to tp_size for the DeepEP, Mooncake, NIXL, FlashInfer
and MoRI all-to-all backends, so `--tp-size 8 --moe-a2a-backend deepep` runs whole experts (EP8)
where the flags read EP1 (every expert sliced 8 ways). Where the env's sglang cannot resolve the
arguments (no sglang in it, a resolution that raised), the recipe's flags are used and the basis
says why. Effects: runs the env's sglang argument probe (or reads its cached outcome).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from toolkit.errors import BadInput, PatchbenchError


def static_resolution(prepared, home: Path) -> tuple[dict, str | None]:
    """(sglang's resolved config for the recipe's arguments, None), or ({}, why there is none). A
    refusal of the arguments by sglang is BadInput: no server of this recipe exists to take shapes of."""
    from toolkit.run.check_cache import cached_check_recipe

    recipe = prepared.recipe
    try:
        with tempfile.TemporaryDirectory(prefix="patchbench-kernels-check-") as tmp:
            check, _ = cached_check_recipe(prepared.env, recipe, Path(tmp), Path(home),
                                           device="cuda" if recipe.server.gpus != 0 else None)
    except BadInput as exc:
        raise exc.located(recipe=recipe.name, step="check") from None
    except PatchbenchError as exc:
        return {}, f"no static resolution: {str(exc).splitlines()[0][:200]}"
    if check.unresolved or not check.resolved_config:
        return {}, f"static resolution {check.outcome if check.unresolved else 'reported no resolved config'}"
    return dict(check.resolved_config), None
