"""nvcc over the recipe's `cuda` globs (through the shared compiler cache), and the cuobjdump check
that every CUDA binary an env holds carries SASS for every declared arch."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

from toolkit.envs.steps.arch import gencode_flags, sm_name
from toolkit.envs.steps.ccache import stats_delta
from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.fatbin import Holds, holds, needs_headers
from toolkit.envs.steps.flashinfer_pinned import module_of, pinned_by
from toolkit.envs.steps.python import export_tree
from toolkit.envs.steps.toolchain import find_cuobjdump
from toolkit.errors import BadInput, PatchbenchError
from toolkit.tree.applied import AppliedTree

CUDA_BINARY_SUFFIXES = (".o", ".cubin", ".fatbin", ".so")


def compile_cuda_sources(ctx: BuildContext, trees: Sequence[AppliedTree]) -> dict:
    """Compile each .cu matched by the recipe's `cuda` globs for every arch into
    `<env>/kernels/<source>/<path>.o`, `jobs` at a time, through the shared compiler cache."""
    spec = ctx.spec
    if not ctx.toolchain.nvcc:
        raise PatchbenchError("build.cuda needs nvcc: none found in $CUDA_HOME/bin, "
                              "/usr/local/cuda/bin or PATH", step="cuda")
    by = {t.source: t for t in trees}
    cache = ctx.compiler_cache()
    if cache is None:
        say_no_cache(ctx)
    before = cache.stats(ctx.home) if cache else None
    record: dict[str, Any] = {"flags": gencode_flags(spec.arch) + list(spec.nvcc_flags),
                              "nvcc": ctx.toolchain.nvcc,
                              "compiler_cache": cache.kind if cache else None, "sources": {}}
    for source, patterns in spec.cuda:
        tree = by[source]
        step = f"cuda-{source}"
        with ctx.steps.step(step, f"nvcc {source} for {', '.join(spec.arch)}"):
            src_root = export_tree(ctx, tree)
            files: list[str] = []
            for pattern in patterns:
                hits = sorted(p for p in src_root.glob(pattern) if p.is_file())
                if not hits:
                    raise BadInput(f"build.cuda pattern {pattern!r} matches no file in {source} "
                                   f"(tree {tree.tree_hash[:12]})", step=step)
                files += [p.relative_to(src_root).as_posix() for p in hits]
            files = list(dict.fromkeys(files))
            out_root = ctx.root / "kernels" / source
            commands = []
            objects = []
            for rel in files:
                out = out_root / Path(rel).with_suffix(".o")
                out.parent.mkdir(parents=True, exist_ok=True)
                # With ccache, depend mode (-MD + CCACHE_DEPEND) spares a miss the extra
                # preprocessor pass that direct mode needs: a miss costs what plain nvcc costs.
                deps = []
                if cache and cache.kind == "ccache":  # the .d files stay in the export, not the env
                    dep = src_root / ".deps" / f"{rel}.d"
                    dep.parent.mkdir(parents=True, exist_ok=True)
                    deps = ["-MD", "-MF", str(dep)]
                argv = [*(cache.launcher() if cache else []), ctx.toolchain.nvcc,
                        *gencode_flags(spec.arch), *spec.nvcc_flags, *deps, "-c", rel, "-o", str(out)]
                commands.append((argv, src_root))
                objects.append({"source": rel,
                                "object": out.relative_to(ctx.root).as_posix()})
            cache_env = cache.environ(ctx.home, src_root) if cache else None
            if cache and cache.kind == "ccache":
                cache_env = {**cache_env, "CCACHE_DEPEND": "1"}
            env = ctx.build_environ(cache_env)
            ctx.steps.run_many(step, commands, env=env, jobs=ctx.jobs())
            record["sources"][source] = objects
    delta = stats_delta(before, cache.stats(ctx.home) if cache else None)
    record["ccache"] = delta
    if delta is not None:
        ctx.console.print(f"  ccache: {delta['hits']} hit(s), {delta['misses']} miss(es)")
    return record


def say_no_cache(ctx: BuildContext) -> None:
    ctx.console.print("  [yellow]note[/]: neither ccache nor sccache is installed: every nvcc "
                      "compile runs in full (apt-get install ccache shares compiles across envs)")



def read_holds(path: Path, cuobjdump: Path) -> tuple[list[str], Holds]:
    """(`cuobjdump --list-elf --list-ptx` lines, what the file holds: SASS and PTX per arch), reading
    `-res-usage`'s headers when a family cubin is listed under a plain name (toolkit.envs.steps.fatbin).
    A file with no device code holds nothing; any other cuobjdump failure raises."""
    out = subprocess.run([str(cuobjdump), "--list-elf", "--list-ptx", str(path)], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)
    text = out.stdout + out.stderr
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    if "does not contain device code" in text:
        return lines, Holds(frozenset(), frozenset())
    if out.returncode != 0:
        raise PatchbenchError(f"cuobjdump --list-elf --list-ptx {path} failed: {text.strip()[-300:]}",
                              step="verify")
    res_usage = None
    if needs_headers(out.stdout):
        res_usage = subprocess.run([str(cuobjdump), "-res-usage", str(path)], capture_output=True,
                                   text=True, stdin=subprocess.DEVNULL).stdout
    return lines, holds(out.stdout, res_usage)


def cuda_binary_arches(path: Path, cuobjdump: Path) -> tuple[list[str], set[str]]:
    """(the `--list-elf` lines, the SASS arches the file holds: {"sm_120a", "sm_120f"...}); PTX is
    not SASS (a compute_120a PTX beside an sm_120f cubin does not make the file hold sm_120a)."""
    lines, held = read_holds(path, cuobjdump)
    return [ln for ln in lines if ln.startswith("ELF")], set(held.sass)


def verify_arches(paths: Sequence[Path], arches: Sequence[str], *,
                  cuobjdump: Path | None = None,
                  found: dict | None = None) -> list[str]:
    """Problems (empty: all good): each of the recipe's own binaries must hold SASS for every
    declared arch. A FlashInfer module (flashinfer_pinned.module_of: under cached_ops/ or aot/) is
    judged as FlashInfer builds it: SASS for at least one declared arch and none for an undeclared
    one (an SM120-only module has no 9.0a code in a "12.0a 9.0a" build), and one that fixes its own
    arch (flashinfer_pinned.PINNED) is recorded, not judged.
    `found`, when given, receives {path: {"elf": [...], "arches": [...]}}."""
    if not paths:
        return []
    cuobjdump = cuobjdump or find_cuobjdump()
    if cuobjdump is None:
        raise PatchbenchError("cuobjdump not found: cannot verify CUDA binaries (install the "
                              "CUDA toolkit or PyPI nvidia-cuda-cuobjdump)", step="verify")
    wanted = {a: sm_name(a) for a in arches}
    problems = []
    for p in paths:
        lines, have = cuda_binary_arches(Path(p), cuobjdump)
        if found is not None:
            found[str(p)] = {"elf": lines, "arches": sorted(have)}
        module = module_of(p)
        if module is not None:
            problem = _module_problem(p, module, wanted, have)
            if problem:
                problems.append(problem)
            continue
        missing = [a for a, sm in wanted.items() if sm not in have]
        if missing:
            holds = ", ".join(sorted(have)) or "no device code"
            problems.append(f"{p}: no code for {', '.join(missing)} "
                            f"({', '.join(wanted[a] for a in missing)}); it holds {holds}")
    return problems


def _module_problem(path: Path, module: str, wanted: Mapping[str, str], have: set[str]) -> str | None:
    """The problem of one FlashInfer module's SASS (verify_arches' docstring), or None: it follows the arch
    list for the majors it supports, so it must hold every declared arch of each major it holds code for
    (12.0a and 12.0f both, in a "12.0a 12.0f" build) and none undeclared; 9.0a may be absent from an SM120 module."""
    if pinned_by(module):
        return None
    extra = sorted(have - set(wanted.values()))
    if extra:
        return (f"{path}: holds {', '.join(extra)}, not in the recipe's build.arch {', '.join(wanted)} "
                f"(FlashInfer module {module})")
    holds = ", ".join(sorted(have)) or "no device code"
    if not have & set(wanted.values()):
        return (f"{path}: no code for any of {', '.join(wanted)}; it holds {holds} "
                f"(FlashInfer module {module})")
    majors = {_major(sm) for sm in have}
    missing = [a for a, sm in wanted.items() if _major(sm) in majors and sm not in have]
    if missing:
        return (f"{path}: no code for {', '.join(missing)} ({', '.join(wanted[a] for a in missing)}); it holds "
                f"{holds} (FlashInfer module {module}: a module builds every declared arch of a major it supports)")
    return None


def _major(sm: str) -> int:
    """sm_120a -> 12, sm_90a -> 9."""
    return int("".join(ch for ch in sm[3:] if ch.isdigit())) // 10


def env_cuda_binaries(root: Path, kernels: Mapping[str, Any] | None = None) -> list[Path]:
    """CUDA binaries a build produced: the `cuda` objects, the JIT workspace's modules and the
    AOT copies patchbench installed in the flashinfer package."""
    out = []
    kdir = root / "kernels"
    if kdir.is_dir():
        out += sorted(p for p in kdir.rglob("*") if p.suffix in CUDA_BINARY_SUFFIXES
                      and p.is_file())
    jit = root / "jit"
    if jit.is_dir():
        out += sorted(p for p in jit.rglob("*.so") if p.is_file())
    for name, info in (kernels or {}).items():
        if not name.startswith("_") and isinstance(info, dict) and info.get("aot"):
            out.append(root / info["aot"])
    return list(dict.fromkeys(out))


def verify_env(ctx: BuildContext, *, root: Path | None = None,
               kernels: Mapping[str, Any] | None = None) -> dict:
    """Check with cuobjdump that every CUDA binary in the env holds every declared arch."""
    root = root or ctx.root
    binaries = env_cuda_binaries(root, kernels)
    if not binaries:
        return {}
    if not ctx.spec.arch:
        raise PatchbenchError("the env holds CUDA binaries but the recipe declares no arch "
                              "(build.arch)", step="verify")
    with ctx.steps.step("verify", f"cuobjdump: {len(binaries)} CUDA binaries hold "
                                  f"{', '.join(ctx.spec.arch)}"):
        tools = ctx.tools(["cuobjdump"])
        found: dict = {}
        problems = verify_arches(binaries, ctx.spec.arch, cuobjdump=tools.cuobjdump, found=found)
        rel = {}
        for p, info in found.items():
            r = Path(p).resolve().relative_to(Path(root).resolve()).as_posix()
            rel[r] = info
            ctx.steps.note("verify", f"{r}: {', '.join(info['arches']) or '-'}\n    " +
                           "\n    ".join(info["elf"]))
        if problems:
            ctx.steps.note("verify", "PROBLEMS:\n" + "\n".join(problems))
            first = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ctx.steps.failure("verify", f"a CUDA binary lacks a declared arch: {first}{more}",
                                    hint="the recipe's build.arch and what was compiled disagree")
    return rel
