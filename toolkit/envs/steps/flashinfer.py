"""FlashInfer in an env: refuse prebuilt AOT kernels that would shadow patched sources, and compile
named JIT modules ahead of time without a GPU (private JIT workspace, arch list, shared cache),
installing each as an AOT module. The programs run inside the env live in `toolkit/probes/`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from toolkit.envs.steps.arch import flashinfer_arch_list
from toolkit.envs.steps.ccache import CompilerCache, stats_delta
from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.cuda import say_no_cache
from toolkit.envs.steps.python import project_name
from toolkit.envs.steps.toolchain import ToolDir
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.spec import BuildSpec
from toolkit.tree.applied import AppliedTree
from toolkit.resources import PROBES_DIR

_PROBES = PROBES_DIR
FI_PROBE = _PROBES / "flashinfer_probe.py"
FI_DRIVER = _PROBES / "flashinfer_aot.py"


def needs_flashinfer_check(trees: Sequence[AppliedTree], spec: BuildSpec) -> bool:
    """FlashInfer is patched (a flashinfer tree is installed) or its JIT modules are compiled."""
    if spec.kernels:
        return True
    return any(t.source == "flashinfer" or project_name(t.project_dir) == "flashinfer-python"
               for t in trees)


def check_no_flashinfer_aot(ctx: BuildContext, python: str, *, where: str,
                            own_aot: Sequence[str] = ()) -> dict:
    """Refuse an env where FlashInfer would load prebuilt kernels instead of compiling the
    patched sources: flashinfer-jit-cache (or one of its providers) installed, or AOT modules
    inside the flashinfer package. flashinfer-cubin (NVIDIA's prebuilt cubins, which no source
    tree builds) is only noted."""
    step = "flashinfer-check"
    with ctx.steps.step(step, f"check {where} for FlashInfer AOT packages"):
        out = ctx.steps.run(step, [python, "-I", str(FI_PROBE)], env=ctx.build_environ(),
                            what="FlashInfer package probe")
        found = _last_json(out)
        jit_cache = [d for d in found["dists"] if d["name"].startswith("flashinfer-jit-cache")]
        module = found["modules"].get("flashinfer_jit_cache")
        aot = [m for m in found["aot"] if m not in set(own_aot)]
        if jit_cache or module:
            what = ", ".join(f"{d['name']} {d['version']} ({d['location']})" for d in jit_cache) \
                or f"module flashinfer_jit_cache ({module[0]})"
            raise BadInput(
                f"{what} is installed in the {where}: FlashInfer loads the prebuilt AOT kernels "
                "of flashinfer-jit-cache before compiling anything, so the patched FlashInfer "
                "sources in this env would be silently ignored",
                step=step, log=ctx.steps.log(step),
                hint="uninstall flashinfer-jit-cache from that environment (or use a base "
                     "without it); patchbench compiles the kernels it needs ahead of time itself")
        if aot:
            raise BadInput(
                f"the installed flashinfer package in the {where} ships AOT modules "
                f"({', '.join(aot[:5])}{'...' if len(aot) > 5 else ''} under "
                f"{found['modules']['flashinfer'][0]}/data/aot): they are loaded instead of the "
                "patched sources", step=step, log=ctx.steps.log(step),
                hint="install FlashInfer from source (a tree), not an AOT build")
        cubin = [d for d in found["dists"] if d["name"] == "flashinfer-cubin"]
        if cubin:
            ctx.console.print(f"  note: flashinfer-cubin {cubin[0]['version']} is installed: its "
                              "prebuilt cubins (trtllm-gen) do not come from any source tree and "
                              "are used as is")
    return found


def _last_json(out: str) -> dict:
    for line in reversed(out.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise PatchbenchError("probe printed no JSON")



def flashinfer_environ(ctx_environ: Mapping[str, str], *, root: Path, home: Path,
                       arches: Sequence[str], cuda_home: str | None, tools: ToolDir | None,
                       cache: CompilerCache | None) -> dict[str, str]:
    """Environment of a FlashInfer JIT compile without a GPU: CUDA_HOME, the env's private
    workspace, the arch list, extra headers/stub, and nvcc/c++ through the shared cache."""
    env = dict(ctx_environ)
    env["FLASHINFER_WORKSPACE_BASE"] = str(root / "jit")
    env["FLASHINFER_CUDA_ARCH_LIST"] = flashinfer_arch_list(arches)
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    if tools and tools.include_dirs:
        extra = " ".join(f"-isystem {shlex.quote(str(d))}" for d in tools.include_dirs)
        env["FLASHINFER_EXTRA_CUDAFLAGS"] = (env.get("FLASHINFER_EXTRA_CUDAFLAGS", "") + " "
                                             + extra).strip()
    if tools and tools.libcuda_dir:
        env["FLASHINFER_EXTRA_LDFLAGS"] = (env.get("FLASHINFER_EXTRA_LDFLAGS", "") +
                                           f" -L{shlex.quote(str(tools.libcuda_dir))}").strip()
    if cache is not None:
        env.update(cache.environ(home, home))  # env, jit workspace and toolchain all under home
        if tools and tools.launcher:
            env["FLASHINFER_NVCC_LAUNCHER"] = str(tools.launcher)
        env["FLASHINFER_CXX_LAUNCHER"] = str(cache.path)
    return env


def build_flashinfer_kernels(ctx: BuildContext, names: Sequence[str], *,
                             root: Path | None = None, only: str | None = None) -> dict:
    """Compile named FlashInfer JIT modules (`norm` -> flashinfer.jit gen_norm_module()) with
    nvcc for the recipe's arches, without a GPU, then install each as an AOT module inside the
    env's flashinfer package (`flashinfer/data/aot/<module>/<module>.so`), which FlashInfer loads
    before trying to JIT: they keep working after the env is renamed into place and never need
    nvcc at run time. Build objects stay in the env's private JIT workspace (`<env>/jit`).

    `only` (a glob on source file names): compile just the matching translation units of each
    module, with the module's own flags, and report their objects; nothing is linked or installed."""
    root = root or ctx.root
    if not ctx.toolchain.nvcc:
        raise PatchbenchError("build.kernels needs nvcc: none found in $CUDA_HOME/bin, "
                              "/usr/local/cuda/bin or PATH", step="kernels")
    tools = ctx.tools(["headers", "stub", "launcher"])
    cache = ctx.compiler_cache()
    if cache is None:
        say_no_cache(ctx)
    env = flashinfer_environ(ctx.build_environ(), root=root, home=ctx.home,
                             arches=ctx.spec.arch, cuda_home=ctx.toolchain.cuda_home,
                             tools=tools, cache=cache)
    shown = {k: env[k] for k in sorted(env) if k.startswith(("FLASHINFER_", "CUDA_HOME", "CCACHE_"))
             }
    ctx.console.print("  FlashInfer JIT without a GPU: " +
                      " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items()))
    workdir = root / ".build"
    workdir.mkdir(parents=True, exist_ok=True)
    before = cache.stats(ctx.home) if cache else None
    result: dict[str, Any] = {}
    for name in names:
        step = f"kernels-{name}" + ("-only" if only else "")
        what = f"FlashInfer JIT module {name}" + (f": units matching {only}" if only else "")
        with ctx.steps.step(step, f"{what} for {', '.join(ctx.spec.arch)}"):
            out = ctx.steps.run(step, [root / "bin" / "python", FI_DRIVER, name,
                                       *(["--only", only] if only else [])], env=env,
                                cwd=workdir, what=f"FlashInfer module {name}")
            line = next((ln for ln in reversed(out.splitlines())
                         if ln.startswith("PATCHBENCH_KERNEL ")), None)
            if line is None:
                raise ctx.steps.failure(step, f"FlashInfer module {name}: the driver reported "
                                              "no result")
            info = json.loads(line[len("PATCHBENCH_KERNEL "):])
            for k in ("jit", "aot"):
                if k in info:
                    info[k] = _relative(info[k], root)
            for o in info.get("objects", ()):
                o["object"] = _relative(o["object"], root)
            result[name] = info
    delta = stats_delta(before, cache.stats(ctx.home) if cache else None)
    if delta is not None:
        result["_ccache"] = delta
    return result


def _relative(path: str, root: Path) -> str:
    return Path(path).resolve().relative_to(root.resolve()).as_posix()
