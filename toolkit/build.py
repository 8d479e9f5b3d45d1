"""Builds inside an env: installs from patched trees, nvcc through a shared compiler cache,
FlashInfer ahead-of-time JIT modules, sgl-kernel's CMake arguments, cuobjdump arch checks.

Every step runs argv lists (never a shell string), writes `<env>/logs/<step>.log`, and fails with a
PatchbenchError naming the step, the last lines of its log and the log's path. `toolkit.envs`
calls these steps in order (see `envs._build`); `build_kernels` adds FlashInfer modules to an
env that is already published.

Path independence of the compiler cache: every env and every tree lives at a different path, so
each nvcc call runs with `CCACHE_BASEDIR` set to the directory that holds its sources (the tree's
export for `cuda` globs; PATCHBENCH_HOME for FlashInfer's JIT, whose sources and build directory
sit at the same relative places in every env) and `CCACHE_NOHASHDIR=1`. ccache then rewrites the
absolute paths below the base directory into relative ones before hashing, so the same source
compiled with the same flags hits whatever directory it was exported to.
"""

from __future__ import annotations

import base64
import concurrent.futures
import csv
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from filelock import FileLock

from toolkit import gitrepo
from toolkit.errors import BadInput, PatchbenchError
from toolkit.tree import AppliedTree

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.envs import BuildSpec, Env, PipSources, Toolchain

TAIL_LINES = 15
CUDA_BINARY_SUFFIXES = (".o", ".cubin", ".fatbin", ".so")

# --------------------------------------------------------------------------------------------
# Arch strings: "12.0a" -> sm_120a, "-gencode=arch=compute_120a,code=sm_120a"
# --------------------------------------------------------------------------------------------

_ARCH_RE = re.compile(r"^(\d+)\.(\d)([af]?)$")


def parse_arch(arch: str) -> tuple[int, int, str]:
    """'12.0a' -> (12, 0, 'a'); 'a' = arch-specific, 'f' = family, '' = plain."""
    m = _ARCH_RE.match(arch.strip())
    if not m:
        raise BadInput(f"arch {arch!r} is not like 12.0a, 12.0f, 9.0a or 8.9")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def sm_name(arch: str) -> str:
    major, minor, suffix = parse_arch(arch)
    return f"sm_{major}{minor}{suffix}"


def gencode_flags(arches: Sequence[str]) -> list[str]:
    """nvcc flags that emit SASS for each arch: 12.0a -> compute_120a/sm_120a, 12.0f ->
    compute_120f/sm_120f (cuobjdump --list-elf names that cubin sm_120; its fatbin header
    says sm_120f), 9.0a -> compute_90a/sm_90a."""
    out = []
    for a in arches:
        major, minor, suffix = parse_arch(a)
        cc = f"{major}{minor}{suffix}"
        out.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
    return out


def flashinfer_arch_list(arches: Sequence[str]) -> str:
    """FLASHINFER_CUDA_ARCH_LIST is space-separated ("12.0a 9.0a")."""
    return " ".join(arches)


def torch_arch_list(arches: Sequence[str]) -> str:
    """TORCH_CUDA_ARCH_LIST is semicolon-separated ("12.0a;9.0a")."""
    return ";".join(arches)


# --------------------------------------------------------------------------------------------
# Steps: a log per step, timings, a status line
# --------------------------------------------------------------------------------------------


def _tail(path: Path, n: int = TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [ln for ln in lines if ln.strip()]
    return "\n".join("    " + ln[:300] for ln in lines[-n:])


class Steps:
    """The named steps of one build: `<root>/logs/<step>.log`, wall time per step, progress."""

    def __init__(self, root: Path, console, *, recipe: str | None = None):
        self.root = Path(root)
        self.logs_dir = self.root / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.console = console
        self.recipe = recipe
        self.timings: dict[str, float] = {}
        self.logs: dict[str, str] = {}  # step -> log path relative to root
        self._lock = threading.Lock()

    def log(self, step: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", step)
        path = self.logs_dir / f"{safe}.log"
        self.logs[step] = str(path.relative_to(self.root))
        return path

    def note(self, step: str, text: str) -> None:
        with self._lock, open(self.log(step), "a") as f:
            f.write(text.rstrip("\n") + "\n")

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[None]:
        t0 = time.monotonic()
        self.log(name)
        status = self.console.status(f"[bold]{title}[/] ...") if self.console else None
        try:
            if status:
                status.start()
            yield
        except PatchbenchError as e:
            if status:
                status.stop()
            e.located(recipe=self.recipe, step=name)
            if self.console:
                self.console.print(f"  [red]x[/] {title} ({time.monotonic() - t0:.1f} s)")
            raise
        except BaseException:
            if status:
                status.stop()
            raise
        if status:
            status.stop()
        dt = time.monotonic() - t0
        self.timings[name] = round(self.timings.get(name, 0.0) + dt, 3)
        if self.console:
            self.console.print(f"  [green]ok[/] {title} [dim]({dt:.1f} s, {self.logs[name]})[/]")

    def failure(self, step: str, message: str, *, log: Path | None = None,
                hint: str | None = None) -> PatchbenchError:
        log = log or self.log(step)
        tail = _tail(log)
        msg = message + (f"; last lines of the log:\n{tail}" if tail else "")
        return PatchbenchError(msg, recipe=self.recipe, step=step, log=log, hint=hint)

    def run(self, step: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, what: str | None = None) -> str:
        """Run argv with its output appended to the step's log; return this run's output."""
        argv = [str(a) for a in argv]
        log = self.log(step)
        with open(log, "ab") as f:
            f.write(f"$ {shlex.join(argv)}\n".encode())
            if cwd:
                f.write(f"  (in {cwd})\n".encode())
            f.flush()
            start = f.tell()
            try:
                proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                      cwd=cwd, stdin=subprocess.DEVNULL)
            except OSError as e:
                raise self.failure(step, f"cannot run {argv[0]}: {e}") from e
            f.write(f"[exit {proc.returncode}]\n".encode())
        with open(log, "rb") as f:
            f.seek(start)
            out = f.read().decode(errors="replace")
        if proc.returncode != 0:
            explicit = [ln[len("PATCHBENCH_ERROR "):] for ln in out.splitlines()
                        if ln.startswith("PATCHBENCH_ERROR ")]
            head = explicit[-1] if explicit else \
                f"{what or Path(argv[0]).name} failed (exit {proc.returncode})"
            raise self.failure(step, head)
        return out

    def run_many(self, step: str, commands: Sequence[tuple[list[str], Path]], *,
                 env: Mapping[str, str], jobs: int) -> None:
        """Run independent commands `jobs` at a time; outputs go to the log in order."""
        log = self.log(step)

        def one(cmd: tuple[list[str], Path]) -> tuple[list[str], Path, int, str]:
            argv, cwd = cmd
            try:
                p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                   stdin=subprocess.DEVNULL)
                return argv, cwd, p.returncode, p.stdout + p.stderr
            except OSError as e:
                return argv, cwd, 127, str(e)

        failed = None
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for argv, cwd, rc, out in pool.map(one, commands):
                with open(log, "a") as f:
                    f.write(f"$ {shlex.join(argv)}\n  (in {cwd})\n{out}[exit {rc}]\n")
                if rc != 0 and failed is None:
                    failed = (argv, rc)
        if failed:
            src = next((a for a in failed[0] if a.endswith(".cu")), failed[0][0])
            raise self.failure(step, f"nvcc failed on {src} (exit {failed[1]})")


# --------------------------------------------------------------------------------------------
# The build context
# --------------------------------------------------------------------------------------------


@dataclass
class BuildContext:
    """Everything one env build needs; `root` is the env directory being built."""

    root: Path
    home: Path
    spec: "BuildSpec"
    toolchain: "Toolchain"
    sources: "PipSources"
    steps: Steps
    uv: str
    uv_cache: Path
    console: Any
    fetchcontent: dict = field(default_factory=dict)
    _exports: dict = field(default_factory=dict)
    _tools: "ToolDir | None" = None
    _cache: Any = None
    _cache_probed: bool = False

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def build_dir(self) -> Path:
        return self.root / ".build"

    def uv_cmd(self, *args: str) -> list[str]:
        return [self.uv, *args, "--no-config", "--cache-dir", str(self.uv_cache)]

    def build_environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The caller's environment minus every variable that would silently change what gets
        built (they are not part of the env key), plus the recipe's own `build.env`."""
        env = scrubbed_environ(os.environ)
        if self.toolchain.cuda_home:
            env["CUDA_HOME"] = self.toolchain.cuda_home
        if self.spec.arch:
            env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(self.spec.arch)
            env["FLASHINFER_CUDA_ARCH_LIST"] = flashinfer_arch_list(self.spec.arch)
        if self.spec.jobs:
            env["MAX_JOBS"] = str(self.spec.jobs)
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(self.spec.jobs)
        if self.sources.cert and "SSL_CERT_FILE" not in env:
            env["SSL_CERT_FILE"] = self.sources.cert  # pip's `cert`, for uv
        env.update(dict(self.spec.env))
        env.update(extra or {})
        return env

    def jobs(self) -> int:
        return self.spec.jobs or os.cpu_count() or 1

    def compiler_cache(self) -> "CompilerCache | None":
        if not self._cache_probed:
            self._cache = find_compiler_cache()
            self._cache_probed = True
        return self._cache

    def tools(self, need: Sequence[str]) -> "ToolDir":
        self._tools = ensure_tools(self.home, need, cuda_home=self.toolchain.cuda_home,
                                   nvcc_version=self.toolchain.nvcc_version, uv=self.uv,
                                   uv_cache=self.uv_cache, sources=self.sources,
                                   console=self.console, steps=self.steps)
        return self._tools

    def toolchain_record(self) -> dict:
        cache = self.compiler_cache()
        rec = {
            "python": self.toolchain.python["version"],
            "interpreter": self.toolchain.python["real_executable"],
            "nvcc": self.toolchain.nvcc,
            "nvcc_version": self.toolchain.nvcc_version,
            "cuda_home": self.toolchain.cuda_home,
            "uv": _version_of([self.uv, "--version"]),
            "compiler_cache": None if cache is None else {"kind": cache.kind, "path": str(cache.path),
                                                          "version": cache.version},
        }
        if self._tools is not None:
            rec["tools"] = self._tools.record()
        return rec


# Ambient variables that change build output without being part of the env key: dropped from
# every build environment (the recipe sets what it wants through build.env, which is hashed).
# FLASHINFER_JIT_VERBOSE=1 alone turns FlashInfer 0.7.2's JIT into a -G -O0 debug build.
SCRUBBED_PREFIXES = ("FLASHINFER_", "NVCC_", "CCACHE_", "SCCACHE_", "SKBUILD_", "SGL_KERNEL_",
                     "UV_")  # uv: patchbench passes every source/setting explicitly
SCRUBBED_NAMES = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "PYTHONNOUSERSITE",
                  "TORCH_CUDA_ARCH_LIST", "CUDAFLAGS", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
                  "CMAKE_ARGS", "CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS", "CUDA_HOME", "CUDA_PATH",
                  "CUDACXX", "BUILD_NVEP", "BUILD_NIXL_EP", "BUILD_NCCL_EP")
# transport settings (where the cache is, timeouts, TLS) do not change what is built
_KEEP = ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_INSECURE_HOST", "UV_OFFLINE", "UV_NO_PROGRESS")
_KEEP_PREFIXES = ("UV_HTTP_", "UV_CONCURRENT_", "UV_REQUEST_")


def scrubbed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k in _KEEP or k.startswith(_KEEP_PREFIXES)
            or not (k in SCRUBBED_NAMES or k.startswith(SCRUBBED_PREFIXES))}


def _version_of(argv: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else None


# --------------------------------------------------------------------------------------------
# venv
# --------------------------------------------------------------------------------------------

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


def select_trees(trees: Sequence[AppliedTree], spec: "BuildSpec") -> list[AppliedTree]:
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
            shutil.copytree(src, dest / rel, symlinks=True,
                            ignore=shutil.ignore_patterns(".git"))
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def repack_wheel(tree_dir: Path, out_dir: Path) -> Path:
    """Zip an unpacked wheel (package dirs + one *.dist-info/) back into a .whl with a fresh
    RECORD (sha256 of every file), so that patched files are installed with matching hashes."""
    tree_dir, out_dir = Path(tree_dir), Path(out_dir)
    infos = [p for p in tree_dir.iterdir() if p.is_dir() and p.name.endswith(".dist-info")]
    if len(infos) != 1:
        raise BadInput(f"{tree_dir} is not an unpacked wheel: expected one *.dist-info directory, "
                       f"found {len(infos)}")
    info = infos[0]
    meta = {}
    for line in (info / "METADATA").read_text(errors="replace").splitlines():
        if ":" in line and not line.startswith(" "):
            k, v = line.split(":", 1)
            meta.setdefault(k.strip(), v.strip())
        if not line.strip():
            break
    name, version = meta.get("Name"), meta.get("Version")
    if not name or not version:
        raise BadInput(f"{info}/METADATA lacks Name or Version")
    tags = [ln.split(":", 1)[1].strip() for ln in (info / "WHEEL").read_text().splitlines()
            if ln.startswith("Tag:")]
    if not tags:
        raise BadInput(f"{info}/WHEEL has no Tag: line")
    parts = [t.split("-") for t in tags]
    tag = "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    wheel = out_dir / f"{re.sub(r'[-_.]+', '_', name)}-{version}-{tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)

    skip = {f"{info.name}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    files = []
    for dirpath, dirnames, filenames in os.walk(tree_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        for n in sorted(filenames):
            rel = Path(dirpath, n).relative_to(tree_dir).as_posix()
            if rel not in skip and not n.endswith(".pyc"):
                files.append(rel)
    # dist-info last, as the wheel spec recommends
    files.sort(key=lambda r: (r.startswith(info.name + "/"), r))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            data = (tree_dir / rel).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([rel, f"sha256={digest}", len(data)])
            zi = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            mode = (tree_dir / rel).stat().st_mode & 0o777
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
        writer.writerow([f"{info.name}/RECORD", "", ""])
        zi = zipfile.ZipInfo(f"{info.name}/RECORD", date_time=(1980, 1, 1, 0, 0, 0))
        zi.external_attr = 0o100644 << 16
        zf.writestr(zi, record.getvalue())
    return wheel


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
        with ctx.steps.step(step, f"build {tree.source} ({tree.layout}) from tree "
                                  f"{tree.tree_hash[:12]}"):
            src = export_tree(ctx, tree)
            project = src / tree.package_dir if tree.package_dir else src
            out = wheels_dir / tree.source
            if tree.layout == "wheel":
                wheel = repack_wheel(project, out)
                ctx.steps.note(step, f"re-packed {project} -> {wheel.name}")
            elif _is_sgl_kernel(tree):
                argv, env = sgl_kernel_build_command(
                    project, spec, python=ctx.python, out_dir=out, uv=ctx.uv,
                    uv_cache=ctx.uv_cache, ccache_dir=ctx.home / "ccache",
                    fetchcontent=ctx.fetchcontent, cuda_home=ctx.toolchain.cuda_home,
                    base_environ=environ, index_args=ctx.sources.uv_build_args())
                ctx.steps.run(step, argv, env=env, what="uv build (sgl-kernel, CMake)")
                wheel = _one_wheel(out, step, ctx)
            else:
                ctx.steps.run(step, ctx.uv_cmd("build", "--wheel", "--python", str(ctx.python),
                                               "--out-dir", str(out),
                                               *ctx.sources.uv_build_args(), str(project)),
                              env=environ, what="uv build")
                wheel = _one_wheel(out, step, ctx)
        targets.append(str(wheel))
        installed.append({"source": tree.source, "dist": project_name(project), "editable": False,
                          "wheel": wheel.name, "sha256": _sha256(wheel), "layout": tree.layout})

    reqs = [*spec.packages, *targets]
    if reqs:
        title = (f"install {len(trees)} tree(s) + {len(spec.packages)} package(s) "
                 f"({'--no-deps' if spec.mode == 'overlay' else 'resolving dependencies'})")
        with ctx.steps.step("install", title):
            ctx.steps.run("install", _install_argv(ctx, reqs), env=environ, what="uv pip install")
    return installed


def _install_argv(ctx: BuildContext, reqs: Sequence[str]) -> list[str]:
    argv = ctx.uv_cmd("pip", "install", "--python", str(ctx.python), "--link-mode", "hardlink",
                      *ctx.sources.uv_install_args())
    if ctx.spec.mode == "overlay":
        argv.append("--no-deps")
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
        # our own wheels were built in .build/ (deleted before publishing): name==version
        m = re.match(r"^(\S+) @ file://.*/\.build/wheels/[^/]+/[^-/]+-([^-/]+)-[^/]*\.whl$", ln)
        lines.append(f"{m.group(1)}=={m.group(2)}" if m else ln)
    return [ln for ln in lines if ln]


def cleanup_build_dir(ctx: BuildContext) -> None:
    shutil.rmtree(ctx.build_dir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# sgl-kernel (CMake via scikit-build-core)
# --------------------------------------------------------------------------------------------


def sgl_kernel_build_command(
    project_dir: Path,
    spec: "BuildSpec",
    *,
    python: Path,
    out_dir: Path,
    uv: str,
    uv_cache: Path,
    ccache_dir: Path | None,
    fetchcontent: Mapping[str, Path] | None = None,
    cuda_home: str | None = None,
    base_environ: Mapping[str, str] | None = None,
    index_args: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """argv and environment that build sgl-kernel's wheel for the recipe's arches.

    sgl-kernel's CMakeLists.txt hard-codes its -gencode list per CUDA version and offers toggles:
    ENABLE_BELOW_SM90 (sm_75/80/89), SGL_KERNEL_ENABLE_SM90A, SGL_KERNEL_ENABLE_SM100A (the
    sm_100a/120a block), SGL_KERNEL_ENABLE_FP4, SGL_KERNEL_COMPILE_THREADS, and ENABLE_CCACHE
    (used only when CCACHE_DIR is set). FetchContent sources are pre-seeded with
    FETCHCONTENT_SOURCE_DIR_<NAME> (the declared name upper-cased, e.g. REPO-CUTLASS) and
    FETCHCONTENT_FULLY_DISCONNECTED=ON, so an offline build never downloads. The build runs
    against the env's torch (--no-build-isolation); verification then checks every declared arch
    is in the result, since the CMake file, not the recipe, picks the gencodes.
    """
    arches = [parse_arch(a) for a in spec.arch]
    majors = {m for m, _, _ in arches}
    defines: dict[str, str] = {
        "ENABLE_BELOW_SM90": "ON" if any(m < 9 for m in majors) or not arches else "OFF",
        "SGL_KERNEL_ENABLE_SM90A": "ON" if any(m == 9 and s == "a" for m, _, s in arches) else "OFF",
        "SGL_KERNEL_ENABLE_SM100A": "ON" if any(m >= 10 for m in majors) else "OFF",
        "SGL_KERNEL_ENABLE_FP4": "ON" if any(m >= 10 for m in majors) else "OFF",
        "ENABLE_CCACHE": "ON" if ccache_dir and shutil.which("ccache") else "OFF",
    }
    if spec.jobs:
        defines["SGL_KERNEL_COMPILE_THREADS"] = str(spec.jobs)
    for name, path in sorted((fetchcontent or {}).items()):
        defines[f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"] = str(Path(path).resolve())
    if fetchcontent:
        defines["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    argv = [uv, "build", "--wheel", "--no-config", "--cache-dir", str(uv_cache),
            "--no-build-isolation", "--python", str(python), "--out-dir", str(out_dir),
            *index_args]
    for k, v in defines.items():
        argv.append(f"--config-setting=cmake.define.{k}={v}")
    argv.append(f"--config-setting=build-dir={out_dir.parent / 'sgl-kernel-cmake'}")
    argv.append(str(project_dir))

    env = scrubbed_environ(os.environ) if base_environ is None else dict(base_environ)
    if spec.arch:
        env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(spec.arch)
    if spec.jobs:
        env["MAX_JOBS"] = str(spec.jobs)
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(spec.jobs)
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
        env["CUDACXX"] = str(Path(cuda_home) / "bin" / "nvcc")
    if defines["ENABLE_CCACHE"] == "ON" and ccache_dir:
        env["CCACHE_DIR"] = str(ccache_dir)
        env["CCACHE_BASEDIR"] = str(Path(project_dir).resolve())
        env["CCACHE_NOHASHDIR"] = "1"
    env.update(dict(spec.env))
    return argv, env


# --------------------------------------------------------------------------------------------
# Compiler cache
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompilerCache:
    kind: str  # "ccache" | "sccache"
    path: Path
    version: str | None

    def launcher(self) -> list[str]:
        return [str(self.path)]

    def environ(self, home: Path, basedir: Path) -> dict[str, str]:
        """Shared cache under home; paths below `basedir` hashed as relative paths."""
        if self.kind == "ccache":
            return {"CCACHE_DIR": str(home / "ccache"), "CCACHE_BASEDIR": str(basedir),
                    "CCACHE_NOHASHDIR": "1"}
        return {"SCCACHE_DIR": str(home / "sccache"), "SCCACHE_BASEDIRS": str(basedir)}

    def stats(self, home: Path) -> dict[str, int] | None:
        """Cumulative hits/misses of the shared cache (ccache only)."""
        if self.kind != "ccache":
            return None
        out = subprocess.run([str(self.path), "--print-stats"], capture_output=True, text=True,
                             env={**os.environ, "CCACHE_DIR": str(home / "ccache")},
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            return None
        vals = {}
        for line in out.stdout.splitlines():
            k, _, v = line.partition("\t")
            if v.strip().isdigit():
                vals[k] = int(v)
        return {"hits": vals.get("direct_cache_hit", 0) + vals.get("preprocessed_cache_hit", 0),
                "misses": vals.get("cache_miss", 0)}


def find_compiler_cache() -> CompilerCache | None:
    for kind in ("ccache", "sccache"):
        found = shutil.which(kind)
        if found:
            return CompilerCache(kind, Path(found), _version_of([found, "--version"]))
    return None


def _stats_delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in after}


def _say_no_cache(ctx: BuildContext) -> None:
    ctx.console.print("  [yellow]note[/]: neither ccache nor sccache is installed: every nvcc "
                      "compile runs in full (apt-get install ccache shares compiles across envs)")


# --------------------------------------------------------------------------------------------
# The toolchain directory: cuobjdump, cuBLAS/cuRAND headers, libcuda stub, nvcc launcher
# --------------------------------------------------------------------------------------------


@dataclass
class ToolDir:
    root: Path
    cuobjdump: Path | None = None
    include_dirs: list[Path] = field(default_factory=list)
    libcuda_dir: Path | None = None
    launcher: Path | None = None
    packages: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict:
        return {"root": str(self.root), "cuobjdump": str(self.cuobjdump) if self.cuobjdump else None,
                "cuobjdump_version": _version_of([str(self.cuobjdump), "--version"])
                if self.cuobjdump else None,
                "include_dirs": [str(p) for p in self.include_dirs],
                "libcuda_stub_dir": str(self.libcuda_dir) if self.libcuda_dir else None,
                "nvcc_launcher": str(self.launcher) if self.launcher else None,
                "packages": dict(self.packages)}


_LAUNCHER = """#!/bin/sh
# patchbench: nvcc through ccache. FlashInfer's ninja passes nvcc's long dependency flags, which
# ccache does not parse (it then refuses to cache); the short spellings mean the same to nvcc.
for a in "$@"; do
  shift
  case "$a" in
    --generate-dependencies-with-compile) set -- "$@" -MD ;;
    --generate-nonsystem-dependencies-with-compile) set -- "$@" -MMD ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec {ccache} "$@"
"""

_LIBCUDA_DIRS = ("lib64/stubs", "lib64", "lib/stubs", "targets/x86_64-linux/lib/stubs")
_SYSTEM_LIBCUDA = ("/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib64/libcuda.so",
                   "/usr/lib/aarch64-linux-gnu/libcuda.so", "/usr/lib/wsl/lib/libcuda.so")


def find_cuobjdump(home: Path | None = None, cuda_home: str | None = None) -> Path | None:
    """cuobjdump from the CUDA toolkit, PATH, or patchbench's toolchain dir (PyPI wheel)."""
    cands = []
    for h in (cuda_home, os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if h:
            cands.append(Path(h) / "bin" / "cuobjdump")
    which = shutil.which("cuobjdump")
    if which:
        cands.append(Path(which))
    homes = [home] if home else []
    if os.environ.get("PATCHBENCH_HOME"):
        homes.append(Path(os.environ["PATCHBENCH_HOME"]).expanduser())
    for h in homes:
        cands += sorted((Path(h) / "toolchain" / "py").glob("nvidia/**/bin/cuobjdump"))
    return next((c for c in cands if c.is_file() and os.access(c, os.X_OK)), None)


def _cuda_major(nvcc_version: str | None) -> int | None:
    m = re.search(r"release (\d+)\.", nvcc_version or "")
    return int(m.group(1)) if m else None


def ensure_tools(home: Path, need: Sequence[str], *, cuda_home: str | None,
                 nvcc_version: str | None, uv: str, uv_cache: Path, sources: "PipSources",
                 console, steps: Steps | None = None) -> ToolDir:
    """Set up what an nvcc build on a machine without a GPU or a full CUDA toolkit needs, under
    `home/toolchain` (once; later builds reuse it), and say what was set up.

    need: "cuobjdump" (PyPI nvidia-cuda-cuobjdump unless the toolkit has one), "headers"
    (cuBLAS/cuRAND headers from PyPI nvidia-cublas/nvidia-curand unless CUDA_HOME has them),
    "stub" (a link-only libcuda.so built with the C compiler unless one exists), "launcher"
    (the nvcc-through-ccache wrapper FlashInfer's ninja uses).
    """
    root = Path(home) / "toolchain"
    root.mkdir(parents=True, exist_ok=True)
    tools = ToolDir(root=root)
    record_path = root / "toolchain.json"
    with FileLock(str(root / ".lock"), thread_local=False):
        try:
            tools.packages = json.loads(record_path.read_text()).get("packages", {})
        except (OSError, ValueError):
            tools.packages = {}
        said: list[str] = []
        install: list[str] = []
        major = _cuda_major(nvcc_version) or 13
        if "cuobjdump" in need:
            tools.cuobjdump = find_cuobjdump(home, cuda_home)
            if tools.cuobjdump is None:
                install.append("nvidia-cuda-cuobjdump" if major >= 13 else
                               "nvidia-cuda-cuobjdump-cu12")
        if "headers" in need:
            inc = Path(cuda_home or "/usr/local/cuda") / "include"
            if not ((inc / "cublasLt.h").exists() and (inc / "curand.h").exists()):
                found = _header_dirs(root)
                if found is None:
                    install += ([f"nvidia-cublas=={major}.*", "nvidia-curand"] if major >= 13
                                else ["nvidia-cublas-cu12", "nvidia-curand-cu12"])
        if install:
            log = steps.log("toolchain") if steps else None
            console.print(f"  toolchain: installing {', '.join(install)} from PyPI into {root}/py")
            argv = [uv, "pip", "install", "--no-config", "--cache-dir", str(uv_cache), "--target",
                    str(root / "py"), "--no-deps", "--link-mode", "hardlink",
                    "--python", sys.executable, *sources.uv_install_args(), *install]
            out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if log:
                with open(log, "a") as f:
                    f.write(f"$ {shlex.join(argv)}\n{out.stdout}{out.stderr}[exit {out.returncode}]\n")
            if out.returncode != 0:
                msg = f"cannot install {', '.join(install)}: {out.stderr.strip()[-400:]}"
                raise PatchbenchError(msg, step="toolchain", log=log)
            for line in out.stderr.splitlines():
                m = re.match(r"\s*\+ (\S+)==(\S+)", line)
                if m:
                    tools.packages[m.group(1)] = m.group(2)
        if "cuobjdump" in need:
            tools.cuobjdump = find_cuobjdump(home, cuda_home)
            if tools.cuobjdump is None:
                raise PatchbenchError("cuobjdump not found (CUDA toolkit, PATH, or PyPI "
                                      "nvidia-cuda-cuobjdump)", step="toolchain")
            if str(tools.cuobjdump).startswith(str(root)):
                said.append(f"cuobjdump from PyPI ({tools.cuobjdump})")
        if "headers" in need:
            inc = Path(cuda_home or "/usr/local/cuda") / "include"
            if not ((inc / "cublasLt.h").exists() and (inc / "curand.h").exists()):
                found = _header_dirs(root)
                if found is None:
                    raise PatchbenchError("cuBLAS/cuRAND headers not found after installing "
                                          "nvidia-cublas/nvidia-curand", step="toolchain")
                tools.include_dirs = found
                said.append("cuBLAS/cuRAND headers from PyPI nvidia-cublas/nvidia-curand "
                            f"(-isystem {' '.join(map(str, found))})")
        if "stub" in need:
            if not _has_libcuda(cuda_home):
                stub = root / "stub" / "libcuda.so"
                if not stub.exists():
                    stub.parent.mkdir(parents=True, exist_ok=True)
                    (stub.parent / "empty.c").write_text("/* link-only libcuda stub */\n")
                    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or "cc"
                    tmp = stub.with_suffix(f".so.{os.getpid()}")
                    out = subprocess.run([cc, "-shared", "-Wl,-soname,libcuda.so.1", "-o", str(tmp),
                                          str(stub.parent / "empty.c")], capture_output=True,
                                         text=True, stdin=subprocess.DEVNULL)
                    if out.returncode != 0:
                        raise PatchbenchError(f"cannot build the libcuda stub with {cc}: "
                                              f"{out.stderr.strip()[-300:]}", step="toolchain")
                    os.replace(tmp, stub)
                tools.libcuda_dir = stub.parent
                said.append(f"link-only libcuda.so stub ({stub}; soname libcuda.so.1; nothing "
                            "can run it here)")
        if "launcher" in need:
            cache = find_compiler_cache()
            if cache is not None and cache.kind == "ccache":
                launcher = root / "bin" / "nvcc-ccache"
                text = _LAUNCHER.format(ccache=shlex.quote(str(cache.path)))
                if not launcher.exists() or launcher.read_text() != text:
                    launcher.parent.mkdir(parents=True, exist_ok=True)
                    tmp = launcher.with_name(f".nvcc-ccache.{os.getpid()}")
                    tmp.write_text(text)
                    tmp.chmod(0o755)
                    os.replace(tmp, launcher)
                tools.launcher = launcher
            elif cache is not None:
                tools.launcher = cache.path
        record_path.write_text(json.dumps({"packages": tools.packages}, indent=2) + "\n")
    if said:
        console.print("  toolchain (set up by patchbench under "
                      f"{root}): " + "; ".join(said))
    return tools


def _header_dirs(root: Path) -> list[Path] | None:
    dirs = []
    for header in ("cublasLt.h", "curand.h"):
        hits = sorted((root / "py").glob(f"nvidia/**/include/{header}"))
        if not hits:
            return None
        dirs.append(hits[0].parent)
    return list(dict.fromkeys(dirs))


def _has_libcuda(cuda_home: str | None) -> bool:
    if cuda_home and any((Path(cuda_home) / d / "libcuda.so").exists() for d in _LIBCUDA_DIRS):
        return True
    return any(Path(p).exists() for p in _SYSTEM_LIBCUDA)


# --------------------------------------------------------------------------------------------
# nvcc: the recipe's `cuda` globs
# --------------------------------------------------------------------------------------------


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
        _say_no_cache(ctx)
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
    delta = _stats_delta(before, cache.stats(ctx.home) if cache else None)
    record["ccache"] = delta
    if delta is not None:
        ctx.console.print(f"  ccache: {delta['hits']} hit(s), {delta['misses']} miss(es)")
    return record


# --------------------------------------------------------------------------------------------
# FlashInfer
# --------------------------------------------------------------------------------------------

_FI_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os
dists = []
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith("flashinfer"):
        dists.append({"name": name, "version": d.version, "location": str(d.locate_file(""))})
mods = {}
for m in ("flashinfer_jit_cache", "flashinfer_cubin", "flashinfer"):
    try:
        s = importlib.util.find_spec(m)
    except Exception:
        s = None
    mods[m] = None if s is None else (list(s.submodule_search_locations or []) or [s.origin])
aot = []
if mods["flashinfer"]:
    d = os.path.join(mods["flashinfer"][0], "data", "aot")
    if os.path.isdir(d):
        aot = sorted(os.listdir(d))
print(json.dumps({"dists": dists, "modules": mods, "aot": aot}))
"""


def needs_flashinfer_check(trees: Sequence[AppliedTree], spec: "BuildSpec") -> bool:
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
        out = ctx.steps.run(step, [python, "-I", "-c", _FI_PROBE], env=ctx.build_environ(),
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


_FI_DRIVER = r'''
"""patchbench: compile one FlashInfer JIT module ahead of time and install it as AOT."""
import hashlib, importlib, json, pkgutil, shutil, sys, time, traceback

name = sys.argv[1]
try:
    import flashinfer.jit as J
    from flashinfer.jit import env as jit_env
except Exception as e:
    traceback.print_exc()
    print(f"PATCHBENCH_ERROR cannot import flashinfer.jit in this env ({type(e).__name__}: {e})")
    sys.exit(3)


def candidates(name):
    if ":" in name:
        mod, _, fn = name.partition(":")
        yield importlib.import_module(mod), fn
        return
    fns = [name] if name.startswith("gen_") else [f"gen_{name}_module", name]
    mods = [J]
    try:
        mods.append(importlib.import_module(f"flashinfer.jit.{name}"))
    except ImportError:
        pass
    for m in mods:
        for fn in fns:
            yield m, fn
    for info in pkgutil.walk_packages(J.__path__, "flashinfer.jit."):
        try:
            m = importlib.import_module(info.name)
        except Exception:
            continue
        for fn in fns:
            yield m, fn


gen = where = None
for mod, fn in candidates(name):
    f = getattr(mod, fn, None)
    if callable(f):
        gen, where = f, f"{mod.__name__}.{fn}"
        break
if gen is None:
    print(f"PATCHBENCH_ERROR no FlashInfer JIT generator for {name!r} (tried gen_{name}_module "
          "in flashinfer.jit and its submodules; a full name `module:function` also works)")
    sys.exit(3)
try:
    spec = gen()
except TypeError as e:
    print(f"PATCHBENCH_ERROR {where}() needs arguments ({e}); only argument-free generators can "
          "be named in build.kernels")
    sys.exit(3)
if not hasattr(spec, "jit_library_path"):
    print(f"PATCHBENCH_ERROR {where}() returned a {type(spec).__name__}, not an nvcc JIT spec")
    sys.exit(3)
print(f"patchbench: {where}() -> module {spec.name}, sources:", *map(str, spec.sources), sep="\n  ")
t0 = time.time()
spec.build(verbose=True)
lib = spec.jit_library_path
aot = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
aot.parent.mkdir(parents=True, exist_ok=True)
tmp = aot.with_name(f".{aot.name}.tmp")
shutil.copy2(lib, tmp)
tmp.replace(aot)  # atomic: a process loading the module never sees half a file
print("PATCHBENCH_KERNEL " + json.dumps({
    "name": name, "generator": where, "module": spec.name, "jit": str(lib), "aot": str(aot),
    "sha256": hashlib.sha256(aot.read_bytes()).hexdigest(), "seconds": round(time.time() - t0, 1),
}))
'''


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
                             root: Path | None = None) -> dict:
    """Compile named FlashInfer JIT modules (`norm` -> flashinfer.jit gen_norm_module()) with
    nvcc for the recipe's arches, without a GPU, then install each as an AOT module inside the
    env's flashinfer package (`flashinfer/data/aot/<module>/<module>.so`), which FlashInfer loads
    before trying to JIT: they keep working after the env is renamed into place and never need
    nvcc at run time. Build objects stay in the env's private JIT workspace (`<env>/jit`)."""
    root = root or ctx.root
    if not ctx.toolchain.nvcc:
        raise PatchbenchError("build.kernels needs nvcc: none found in $CUDA_HOME/bin, "
                              "/usr/local/cuda/bin or PATH", step="kernels")
    tools = ctx.tools(["headers", "stub", "launcher"])
    cache = ctx.compiler_cache()
    if cache is None:
        _say_no_cache(ctx)
    env = flashinfer_environ(ctx.build_environ(), root=root, home=ctx.home,
                             arches=ctx.spec.arch, cuda_home=ctx.toolchain.cuda_home,
                             tools=tools, cache=cache)
    shown = {k: env[k] for k in sorted(env) if k.startswith(("FLASHINFER_", "CUDA_HOME", "CCACHE_"))
             }
    ctx.console.print("  FlashInfer JIT without a GPU: " +
                      " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items()))
    driver = root / ".build" / "flashinfer_aot.py"
    driver.parent.mkdir(parents=True, exist_ok=True)
    driver.write_text(_FI_DRIVER)
    before = cache.stats(ctx.home) if cache else None
    result: dict[str, Any] = {}
    for name in names:
        step = f"kernels-{name}"
        with ctx.steps.step(step, f"FlashInfer JIT module {name} for {', '.join(ctx.spec.arch)}"):
            out = ctx.steps.run(step, [root / "bin" / "python", driver, name], env=env,
                                cwd=driver.parent, what=f"FlashInfer module {name}")
            line = next((ln for ln in reversed(out.splitlines())
                         if ln.startswith("PATCHBENCH_KERNEL ")), None)
            if line is None:
                raise ctx.steps.failure(step, f"FlashInfer module {name}: the driver reported "
                                              "no result")
            info = json.loads(line[len("PATCHBENCH_KERNEL "):])
            for k in ("jit", "aot"):
                info[k] = Path(info[k]).resolve().relative_to(root.resolve()).as_posix()
            result[name] = info
    delta = _stats_delta(before, cache.stats(ctx.home) if cache else None)
    if delta is not None:
        result["_ccache"] = delta
    return result


# --------------------------------------------------------------------------------------------
# Verification with cuobjdump
# --------------------------------------------------------------------------------------------


def cuda_binary_arches(path: Path, cuobjdump: Path) -> tuple[list[str], set[str]]:
    """(`cuobjdump --list-elf` lines, the SASS arches the file holds: {"sm_120a", "sm_120f"...}).

    --list-elf names a family cubin like a plain one (sm_120); the fatbin header printed by
    `cuobjdump -res-usage` ("arch = sm_120f") tells them apart, so it is read when a plain name
    shows up."""
    out = subprocess.run([str(cuobjdump), "--list-elf", str(path)], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)
    text = out.stdout + out.stderr
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    if "does not contain device code" in text:
        return lines, set()
    if out.returncode != 0:
        raise PatchbenchError(f"cuobjdump --list-elf {path} failed: {text.strip()[-300:]}",
                              step="verify")
    arches = set(re.findall(r"\.(sm_\d+[af]?)\.cubin", out.stdout))
    if any(re.fullmatch(r"sm_\d+", a) for a in arches):
        res = subprocess.run([str(cuobjdump), "-res-usage", str(path)], capture_output=True,
                             text=True, stdin=subprocess.DEVNULL)
        header = set(re.findall(r"^arch = (sm_\d+[af]?)\s*$", res.stdout, re.M))
        if header:
            arches = header | {a for a in arches if not re.fullmatch(r"sm_\d+", a)}
    return lines, arches


def verify_arches(paths: Sequence[Path], arches: Sequence[str], *,
                  cuobjdump: Path | None = None,
                  found: dict | None = None) -> list[str]:
    """Problems (empty: all good): each binary must hold SASS for every declared arch.
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
        missing = [a for a, sm in wanted.items() if sm not in have]
        if missing:
            holds = ", ".join(sorted(have)) or "no device code"
            problems.append(f"{p}: no code for {', '.join(missing)} "
                            f"({', '.join(wanted[a] for a in missing)}); it holds {holds}")
    return problems


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


# --------------------------------------------------------------------------------------------
# Adding FlashInfer modules to a published env
# --------------------------------------------------------------------------------------------


def build_kernels(env: "Env", trees: Sequence[AppliedTree], spec: "BuildSpec",
                  names: Sequence[str], *, home: Path, console=None) -> dict:
    """Compile FlashInfer JIT modules into an existing env (`patchbench build --kernels`).

    The modules come from the env's own (patched) sources with its arch list and toolchain, so
    they are a function of the env's identity; they are verified with cuobjdump and recorded in
    the manifest. Names already built are skipped."""
    from toolkit import envs as envs_mod

    home = Path(home).expanduser().resolve()
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    if not spec.arch:
        raise BadInput("--kernels needs build.arch in the recipe (e.g. arch = [\"12.0a\"])")
    todo = [n for n in names if n not in env.manifest.get("kernels", {})]
    if not todo:
        console.print(f"env {env.name}: kernels {', '.join(names)} already built; nothing to do")
        return dict(env.manifest.get("kernels", {}))
    toolchain = envs_mod.probe_toolchain(spec)
    with envs_mod._lock(home, env.key):
        manifest = envs_mod.read_manifest(env.path) or dict(env.manifest)
        steps = Steps(env.path, console)
        ctx = BuildContext(root=env.path, home=home, spec=spec, toolchain=toolchain,
                           sources=envs_mod.pip_sources(), steps=steps, uv=toolchain.uv,
                           uv_cache=envs_mod.uv_cache_dir(home), console=console)
        own = [v["module"] for v in manifest.get("kernels", {}).values() if isinstance(v, dict)
               and "module" in v]
        check_no_flashinfer_aot(ctx, str(env.python), where="env", own_aot=own)
        built = build_flashinfer_kernels(ctx, todo, root=env.path)
        kernels = {**manifest.get("kernels", {}), **built}
        verification = verify_env(ctx, root=env.path, kernels=kernels)
        shutil.rmtree(env.path / ".build", ignore_errors=True)
        manifest["kernels"] = kernels
        manifest["verification"] = verification
        manifest.setdefault("logs", {}).update(steps.logs)
        manifest.setdefault("timings", {}).update(steps.timings)
        manifest["toolchain"] = {**manifest.get("toolchain", {}), **ctx.toolchain_record()}
        envs_mod.write_manifest(env.path, manifest)
    return kernels
