"""The Python side of an env build: a relocatable uv venv (overlay mode adds the base's site
directories), each tree exported at exactly its tree hash, built into a wheel (an unpacked-wheel
tree is re-packed with a fresh RECORD), one `uv pip install`, and the resolved package list."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from toolkit.tree import gitrepo
from toolkit.envs.steps import wheel_cache
from toolkit.envs.steps.context import BuildContext
from toolkit.envs.steps.sgl_kernel import sgl_kernel_build_command
from toolkit.envs.steps.wheel import repack_tree
from toolkit.errors import PatchbenchError
from toolkit.recipe.spec import BuildSpec
from toolkit.tree.applied import AppliedTree
from toolkit.digest import sha256_file

BASE_PTH = "_patchbench_base.pth"


def create_venv(ctx: BuildContext) -> None:
    """A relocatable uv venv at ctx.root (so the publishing rename keeps it working). In overlay
    mode a .pth file appends base_python's site directories after the env's own, so the env sees
    the base's packages (torch...) without reinstalling them, and its own installs shadow them."""
    spec, py = ctx.spec, ctx.toolchain.python
    with ctx.steps.step("venv", f"create {spec.mode} venv (Python {py['version']})"):
        ctx.steps.run("venv", ctx.uv_cmd("venv", "--relocatable", "--allow-existing",
                                         "--no-python-downloads", "--python", py["executable"],
                                         str(ctx.root)), env=ctx.build_environ(), what="uv venv")
        if spec.mode == "overlay":
            site = _site_packages(ctx.root)
            lines = [f"import site; site.addsitedir({d!r})" for d in py["site_dirs"]]
            (site / BASE_PTH).write_text("\n".join(lines) + "\n")
            ctx.steps.note("venv", f"overlay: {site / BASE_PTH} adds {py['site_dirs']}")
        ctx.steps.run("venv", [ctx.python, "-c", "import sys; print(sys.version); print(sys.path)"],
                      env=ctx.build_environ(), what="the new env's python")


def _site_packages(root: Path) -> Path:
    found = sorted(root.glob("lib/python*/site-packages"))
    if not found:
        raise PatchbenchError(f"no site-packages under {root}/lib")
    return found[0]


# --------------------------------------------------------------------------------------------
# Sources -> wheels -> install
# --------------------------------------------------------------------------------------------


def select_trees(trees: Sequence[AppliedTree], spec: BuildSpec) -> list[AppliedTree]:
    by = {t.source: t for t in trees}
    if spec.install is None:
        return list(trees)
    return [by[name] for name in spec.install]


def export_tree(ctx: BuildContext, tree: AppliedTree) -> Path:
    """The tree's committed content (exactly `tree_hash`) in `.build/src/<source>/`: builds
    never see untracked leftovers (build/, *.egg-info) and never write into the tree."""
    if tree.source in ctx._exports:
        return ctx._exports[tree.source]
    dest = ctx.build_dir / "src" / tree.source
    dest.mkdir(parents=True, exist_ok=True)
    step = f"export-{tree.source}"
    ctx.steps.note(step, f"git archive {tree.tree_hash} of {tree.path} -> {dest}")
    try:
        gitlinks = gitrepo.export(tree.path, tree.tree_hash, dest)
    except PatchbenchError as e:
        ctx.steps.note(step, e.message)
        raise ctx.steps.failure(step, e.message) from e
    # git archive leaves submodules (gitlinks) empty: copy their checked-out content
    for rel in gitlinks:
        src = tree.path / rel
        if src.is_dir() and any(src.iterdir()):
            shutil.rmtree(dest / rel, ignore_errors=True)
            shutil.copytree(src, dest / rel, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            ctx.steps.note(step, f"submodule {rel}: copied from the work tree")
        else:
            ctx.steps.note(step, f"submodule {rel}: not checked out in {tree.path}; left empty")
    ctx._exports[tree.source] = dest
    return dest


def project_name(project_dir: Path) -> str | None:
    """The distribution name a project declares (pyproject [project].name, or a wheel's
    *.dist-info METADATA), or None when it is dynamic."""
    import tomllib

    pyproject = project_dir / "pyproject.toml"
    if pyproject.is_file():
        try:
            name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
        except (tomllib.TOMLDecodeError, OSError):
            name = None
        if name:
            return _normalise(name)
    for info in project_dir.glob("*.dist-info/METADATA"):
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Name:"):
                return _normalise(line.split(":", 1)[1].strip())
    return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_sgl_kernel(tree: AppliedTree) -> bool:
    return tree.source == "sgl-kernel" or project_name(tree.project_dir) == "sgl-kernel"


def install_trees(ctx: BuildContext, trees: Sequence[AppliedTree]) -> list[dict]:
    """Install the recipe's packages and every selected tree into the env.

    Non-editable trees are built into wheels from their exported content (`uv build`; an
    unpacked-wheel tree is re-packed), then installed in one `uv pip install` with the extra
    packages, so full mode resolves all declared dependencies together and overlay mode installs
    exactly these with --no-deps. Editable trees are installed from their work tree (`-e`).
    """
    spec = ctx.spec
    installed: list[dict] = []
    targets: list[str] = []
    environ = ctx.build_environ()
    wheels_dir = ctx.build_dir / "wheels"

    if any(_is_sgl_kernel(t) for t in trees) and not spec.editable:
        # sgl-kernel builds against the env's torch (--no-build-isolation): install first
        prereq = [*spec.packages, "scikit-build-core>=0.10", "cmake>=3.26", "ninja", "wheel"]
        with ctx.steps.step("install-prereq", "install build prerequisites for sgl-kernel"):
            ctx.steps.run("install-prereq", _install_argv(ctx, prereq), env=environ,
                          what="uv pip install")

    for tree in trees:
        step = f"build-{tree.source}"
        if spec.editable and tree.layout != "wheel":
            targets += ["-e", str(tree.project_dir)]
            installed.append({"source": tree.source, "dist": project_name(tree.project_dir),
                              "editable": True, "path": str(tree.project_dir)})
            continue
        if tree.layout != "wheel" and not _is_sgl_kernel(tree):
            wheel, cached = _built_wheel(ctx, tree, step, wheels_dir / tree.source, environ)
            targets.append(str(wheel))
            installed.append({"source": tree.source, "dist": project_name(tree.project_dir),
                              "editable": False, "wheel": wheel.name, "sha256": sha256_file(wheel),
                              "layout": tree.layout, "cached": cached})
            continue
        out = wheels_dir / tree.source
        with ctx.steps.step(step, f"build {tree.source} ({tree.layout}) from tree "
                                  f"{tree.tree_hash[:12]}"):
            if tree.layout == "wheel":  # zipped straight from git's objects: no export
                wheel = repack_tree(tree.path, tree.tree_hash, out)
                ctx.steps.note(step, f"re-packed tree {tree.tree_hash} of {tree.path} -> {wheel.name}")
            else:
                src = export_tree(ctx, tree)
                project = src / tree.package_dir if tree.package_dir else src
                argv, env = sgl_kernel_build_command(
                    project, spec, python=ctx.python, out_dir=out, uv=ctx.uv,
                    uv_cache=ctx.uv_cache, ccache_dir=ctx.home / "ccache",
                    fetchcontent=ctx.fetchcontent, cuda_home=ctx.toolchain.cuda_home,
                    base_environ=environ, index_args=ctx.sources.uv_build_args())
                ctx.steps.run(step, argv, env=env, what="uv build (sgl-kernel, CMake)")
                wheel = _one_wheel(out, step, ctx)
        targets.append(str(wheel))
        installed.append({"source": tree.source, "dist": project_name(tree.project_dir),
                          "editable": False,
                          "wheel": wheel.name, "sha256": sha256_file(wheel), "layout": tree.layout})

    reqs = [*spec.packages, *targets]
    if reqs:
        title = (f"install {len(trees)} tree(s) + {len(spec.packages)} package(s) "
                 f"({'--no-deps' if spec.mode == 'overlay' else 'resolving dependencies'})")
        with ctx.steps.step("install", title):
            ctx.steps.run("install", _install_argv(ctx, reqs), env=environ, what="uv pip install")
    return installed


def _built_wheel(ctx: BuildContext, tree: AppliedTree, step: str, out: Path,
                 environ: dict) -> tuple[Path, bool]:
    """The tree's wheel from the shared wheel cache, built (`uv build`) and cached on a miss.
    Returns (wheel, reused)."""
    inputs = wheel_cache.wheel_key_inputs(ctx, tree)
    key = wheel_cache.wheel_key(ctx, tree)
    hit = wheel_cache.cached_wheel(ctx.home, key)
    if hit is not None:
        with ctx.steps.step(step, f"{tree.source}: wheel of tree {tree.tree_hash[:12]} from the "
                                  f"cache ({hit.name}; nothing built)"):
            ctx.steps.note(step, f"wheel cache hit {key[:wheel_cache.KEY_LEN]}: {hit}")
        return hit, True
    with ctx.steps.step(step, f"build {tree.source} ({tree.layout}) from tree "
                              f"{tree.tree_hash[:12]}"), wheel_cache.lock(ctx.home, key):
        hit = wheel_cache.cached_wheel(ctx.home, key)  # built by another process meanwhile
        if hit is not None:
            ctx.steps.note(step, f"wheel cache hit {key[:wheel_cache.KEY_LEN]}: {hit}")
            return hit, True
        src = export_tree(ctx, tree)
        project = src / tree.package_dir if tree.package_dir else src
        ctx.steps.run(step, ctx.uv_cmd("build", "--wheel", "--python", str(ctx.python),
                                       "--out-dir", str(out), *ctx.sources.uv_build_args(),
                                       str(project)), env=environ, what="uv build")
        wheel = wheel_cache.publish_wheel(ctx.home, key, inputs, _one_wheel(out, step, ctx))
        ctx.steps.note(step, f"cached as {wheel}")
    return wheel, False


def _install_argv(ctx: BuildContext, reqs: Sequence[str]) -> list[str]:
    argv = ctx.uv_cmd("pip", "install", "--python", str(ctx.python), "--link-mode", "hardlink",
                      *ctx.sources.uv_install_args())
    if ctx.spec.mode == "overlay":
        argv.append("--no-deps")
    for flag, reqs_file, items in (("--overrides", "overrides.txt", ctx.spec.overrides),
                                   ("--excludes", "excludes.txt", ctx.spec.excludes)):
        if items:
            path = ctx.build_dir / reqs_file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{r}\n" for r in items))
            argv += [flag, str(path)]
    return argv + list(reqs)


def _one_wheel(out: Path, step: str, ctx: BuildContext) -> Path:
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise ctx.steps.failure(step, f"expected one wheel in {out}, found {len(wheels)}")
    return wheels[0]


def freeze(ctx: BuildContext) -> list[str]:
    """The env's resolved package list (`uv pip freeze`), recorded in the manifest."""
    with ctx.steps.step("freeze", "record installed packages"):
        out = subprocess.run(ctx.uv_cmd("pip", "freeze", "--python", str(ctx.python)),
                             capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             env=ctx.build_environ())
        ctx.steps.note("freeze", out.stdout + out.stderr)
        if out.returncode != 0:
            raise ctx.steps.failure("freeze", "uv pip freeze failed")
    lines = []
    for ln in out.stdout.splitlines():
        ln = ln.strip()
        # our own wheels (built in .build/, or from the wheel cache): name==version
        m = re.match(r"^(\S+) @ file://.*/(?:\.build/wheels/[^/]+|wheels/[0-9a-f]+)/"
                     r"[^-/]+-([^-/]+)-[^/]*\.whl$", ln)
        lines.append(f"{m.group(1)}=={m.group(2)}" if m else ln)
    return [ln for ln in lines if ln]


def cleanup_build_dir(ctx: BuildContext) -> None:
    shutil.rmtree(ctx.build_dir, ignore_errors=True)
