"""Content-addressed, isolated Python environments: identity, creation, atomic publish, list, gc.

An env's key is the sha256 of a canonical JSON document (`key_inputs`) holding everything that can
change what runs in it: each source's tree hash, the build settings (`BuildSpec`), the Python
version, the dependency set (extra packages plus the pip/uv sources they resolve from) and the
toolchain (nvcc; in overlay mode the base interpreter's torch/CUDA and its package set). Same key:
the env is reused with zero work. Any difference: a new env. Never stale.

On-disk layout under `home` (PATCHBENCH_HOME):

    envs/<key[:16]>/              a published env (complete: the rename is the publish)
        bin/python ...            a relocatable uv venv
        kernels/<source>/...      nvcc objects of the recipe's `cuda` globs
        jit/                      FLASHINFER_WORKSPACE_BASE, private to this env
        logs/<step>.log           one log per build step
        patchbench-env.json       the manifest, written last
    envs/.tmp-<key16>-<pid>/      a build in progress (or killed): never used, removed later
    envs/.failed-<key16>-<pid>/   the logs of a failed build
    envs/.locks/<key16>.lock      one lock per key: concurrent builds of one key wait, then reuse
    toolchain/                    cuobjdump, cuBLAS/cuRAND headers, libcuda stub, nvcc launcher
    ccache/                       CCACHE_DIR shared by every env and recipe

The build itself (installs, nvcc, FlashInfer JIT, verification) lives in `toolkit.build`; this
module owns identity, the env's lifecycle and the manifest.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from filelock import FileLock, Timeout

from toolkit import gitrepo
from toolkit.errors import BadInput, PatchbenchError
from toolkit.spec import BuildSpec, canonical_json, jsonable as _jsonable
from toolkit.tree import AppliedTree

MANIFEST = "patchbench-env.json"
SCHEMA = 1
KEY_LEN = 16  # directory names use key[:16]; the manifest holds the full key


def validate_spec(spec: BuildSpec, trees: Sequence[AppliedTree]) -> None:
    """Reject settings that cannot build, before any work (BadInput, exit 2)."""
    from toolkit.build import parse_arch

    if spec.mode not in ("full", "overlay"):
        raise BadInput(f"build.mode must be 'full' or 'overlay', not {spec.mode!r}")
    if spec.mode == "overlay" and not spec.base_python:
        raise BadInput("build.mode = 'overlay' needs build.base_python (the interpreter to overlay)")
    for a in spec.arch:
        parse_arch(a)
    names = [t.source for t in trees]
    if len(set(names)) != len(names):
        raise BadInput(f"two trees share a source name: {names}")
    for name in spec.install or ():
        if name not in names:
            raise BadInput(f"build.install names {name!r}, which is not a source of this recipe",
                           hint=f"sources: {', '.join(names) or 'none'}")
    for name, patterns in spec.cuda:
        if name not in names:
            raise BadInput(f"build.cuda names {name!r}, which is not a source of this recipe")
        if not patterns:
            raise BadInput(f"build.cuda for {name!r} has no glob patterns")
    if (spec.cuda or spec.kernels) and not spec.arch:
        raise BadInput("build.cuda / build.kernels need build.arch (e.g. arch = [\"12.0a\"])")
    if spec.jobs is not None and spec.jobs < 1:
        raise BadInput(f"build.jobs must be >= 1, not {spec.jobs}")


# --------------------------------------------------------------------------------------------
# pip's configured sources, handed to uv (uv does not read pip's configuration)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipSources:
    """Where packages come from, as pip is configured here (pip.conf files and PIP_* variables)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None  # pip's `cert` (CA bundle): given to uv as SSL_CERT_FILE
    origin: tuple[str, ...] = ()  # the files/variables these came from (for the manifest)

    def uv_index_args(self) -> list[str]:
        """Index/find-links flags shared by `uv pip install` and `uv build`."""
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        if self.extra_index_urls:
            # pip picks the best version across every index; uv stops at the first index that has
            # the name unless told otherwise (a local mirror with an older blobfile, say).
            args += ["--index-strategy", "unsafe-best-match"]
        for loc in self.find_links:
            args += ["--find-links", loc]
        return args

    def uv_install_args(self) -> list[str]:
        args = self.uv_index_args()
        for c in self.constraints:
            args += ["--constraint", c]
        return args

    def uv_build_args(self) -> list[str]:
        args = self.uv_index_args()
        for c in self.constraints:  # pip applies its constraints to build environments too
            args += ["--build-constraints", c]
        return args

    def identity(self) -> dict:
        """What the resolution depends on: URLs, local find-links listings, constraint contents."""
        listings = {}
        for loc in self.find_links:
            p = Path(loc[7:] if loc.startswith("file://") else loc)
            if p.is_dir():
                listings[loc] = sorted(x.name for x in p.iterdir())
        constraints = {}
        for c in self.constraints:
            try:
                constraints[c] = hashlib.sha256(Path(c).read_bytes()).hexdigest()
            except OSError:
                constraints[c] = None
        return {
            "index_url": self.index_url,
            "extra_index_urls": list(self.extra_index_urls),
            "find_links": listings | {k: None for k in self.find_links if k not in listings},
            "constraints": constraints,
            "no_index": self.no_index,
        }


def _pip_config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (pip/_internal/configuration.py)."""
    env_file = environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(":") if d]
    files.append(Path("/etc/pip.conf"))
    if not (env_file and Path(env_file).exists()):
        home = Path(environ.get("HOME") or Path.home())
        files.append(home / ".pip" / "pip.conf")
        files.append(Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return files


def pip_sources(environ: Mapping[str, str] | None = None) -> PipSources:
    """Read pip's configured package sources so uv can be given the same ones.

    Order as pip: global files, user files, site file, PIP_CONFIG_FILE, then PIP_* variables;
    within a file `[install]` overrides `[global]`. Relative paths are made absolute.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    origin: list[str] = []
    for path in _pip_config_files(environ):
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error as e:
            raise BadInput(f"cannot parse pip configuration {path}: {e}") from e
        got = False
        for section in ("global", "install"):
            if parser.has_section(section):
                for k, v in parser.items(section):
                    values[k.replace("_", "-")] = v
                    got = True
        if got:
            origin.append(str(path))
    for k, v in environ.items():
        if k.startswith("PIP_") and k != "PIP_CONFIG_FILE":
            values[k[4:].lower().replace("_", "-")] = v
            origin.append(k)

    def split(key: str) -> list[str]:
        return [x for x in re.split(r"\s+", values.get(key, "").strip()) if x]

    def absolute(loc: str) -> str:
        if "://" in loc:
            return loc
        return str(Path(loc).expanduser().resolve())

    def dedupe(xs: Iterable[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(xs))

    no_index = values.get("no-index", "").strip().lower() in ("1", "true", "yes", "on")
    index = values.get("index-url", "").strip() or None
    cert = values.get("cert", "").strip() or None
    return PipSources(
        index_url=absolute(index) if index else None,
        extra_index_urls=dedupe(absolute(x) for x in split("extra-index-url")),
        find_links=dedupe(absolute(x) for x in split("find-links")),
        constraints=dedupe(absolute(x) for x in split("constraint")),
        no_index=no_index,
        cert=str(Path(cert).expanduser()) if cert else None,
        origin=tuple(origin),
    )


# --------------------------------------------------------------------------------------------
# Toolchain probes (cheap: they run on every ensure_env, reuse included)
# --------------------------------------------------------------------------------------------

_PROBE = r"""
import hashlib, importlib.metadata as md, importlib.util, json, os, platform, re, sys
site_dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
dists = sorted({(d.metadata["Name"] or "?").lower() + "==" + (d.version or "?") for d in md.distributions()})
torch = None
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    vfile = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    text = open(vfile).read() if os.path.exists(vfile) else ""
    def grab(name):
        m = re.search(r"^" + name + r"\s*(?::\s*[^=]+)?=\s*['\"]?([^'\"\n]+)['\"]?", text, re.M)
        return None if not m or m.group(1) == "None" else m.group(1)
    torch = {"version": grab("__version__"), "cuda": grab("cuda"), "path": os.path.dirname(vfile)}
print(json.dumps({
    "executable": sys.executable,
    "real_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    "version": platform.python_version(),
    "implementation": platform.python_implementation(),
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "site_dirs": site_dirs,
    "dists": dists,
    "dists_sha256": hashlib.sha256("\n".join(dists).encode()).hexdigest(),
    "torch": torch,
}))
"""


def probe_python(python: str | os.PathLike) -> dict:
    """Version, real interpreter, site dirs, package set and torch of an interpreter."""
    try:
        out = subprocess.run([str(python), "-I", "-c", _PROBE], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise BadInput(f"cannot run Python interpreter {python}: {e}") from e
    if out.returncode != 0:
        raise BadInput(f"Python interpreter {python} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def uv_bin() -> str:
    try:
        import uv  # the `uv` PyPI package ships the binary

        return uv.find_uv_bin()
    except Exception:  # noqa: BLE001 - any failure means: look on PATH
        found = shutil.which("uv")
        if not found:
            raise PatchbenchError("uv is not installed (pip install uv)") from None
        return found


def resolve_python(spec: BuildSpec) -> str:
    """The interpreter the env is built on: overlay -> base_python; full -> python or ours."""
    want = spec.base_python if spec.mode == "overlay" else spec.python
    if not want:
        return sys.executable
    if os.sep in want or Path(want).exists():
        p = Path(want).expanduser()
        if not p.exists():
            raise BadInput(f"Python interpreter {want} does not exist")
        return str(p.absolute())
    found = subprocess.run([uv_bin(), "python", "find", "--no-config", "--no-python-downloads", want],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if found.returncode != 0 or not found.stdout.strip():
        raise BadInput(f"no Python interpreter found for {want!r}",
                       hint="give a path, or install that version")
    return found.stdout.strip().splitlines()[-1]


def find_nvcc(environ: Mapping[str, str] | None = None) -> Path | None:
    """The real nvcc: $CUDA_HOME/bin, /usr/local/cuda/bin, then PATH (often a wrapper)."""
    environ = os.environ if environ is None else environ
    for home in (environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    found = shutil.which("nvcc", path=environ.get("PATH"))
    return Path(found) if found else None


@dataclass(frozen=True)
class Toolchain:
    """What builds and runs the env, as probed now."""

    python: dict  # probe_python() of the interpreter the env is built on
    nvcc: str | None  # nvcc path
    nvcc_version: str | None  # "Cuda compilation tools, release 13.0, V13.0.88"
    cuda_home: str | None
    uv: str

    def identity(self, mode: str) -> dict:
        py = self.python
        d: dict[str, Any] = {
            "python": {"version": py["version"], "implementation": py["implementation"]},
            "nvcc": self.nvcc_version,
        }
        if mode == "overlay":  # the base's packages are part of what runs
            d["base"] = {
                "python": py["real_executable"],
                "site_dirs": py["site_dirs"],
                "torch": None if not py["torch"] else
                {"version": py["torch"]["version"], "cuda": py["torch"]["cuda"]},
                "dists_sha256": py["dists_sha256"],
            }
        return d


def probe_toolchain(spec: BuildSpec) -> Toolchain:
    python = probe_python(resolve_python(spec))
    nvcc = find_nvcc()
    version = None
    if nvcc:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        lines = [ln.strip() for ln in out.stdout.splitlines() if "release" in ln or "Build" in ln]
        version = " / ".join(lines) or out.stdout.strip()
    return Toolchain(python=python, nvcc=str(nvcc) if nvcc else None, nvcc_version=version,
                     cuda_home=str(nvcc.parent.parent) if nvcc else None, uv=uv_bin())


# --------------------------------------------------------------------------------------------
# Identity
# --------------------------------------------------------------------------------------------


def _dir_identity(path: Path) -> dict:
    """A pre-seeded source directory: its git tree hash (+ whether the work tree is dirty)."""
    path = Path(path).expanduser().resolve()
    out = gitrepo.run(path, "rev-parse", "HEAD^{tree}", check=False)
    if out.returncode != 0:
        return {"path": str(path), "tree_hash": None}
    dirty = gitrepo.run(path, "status", "--porcelain", check=False).stdout.strip() != ""
    return {"path": str(path), "tree_hash": out.stdout.strip(), "dirty": dirty}


def key_inputs(trees: Sequence[AppliedTree], spec: BuildSpec, toolchain: Toolchain,
               sources: PipSources | None = None, *,
               fetchcontent: Mapping[str, Path] | None = None) -> dict:
    """The canonical document whose sha256 is the env key (also stored in the manifest)."""
    sources = pip_sources() if sources is None else sources
    d = {
        "schema": SCHEMA,
        "trees": {t.source: {"tree_hash": t.tree_hash, "layout": t.layout,
                             "package_dir": t.package_dir} for t in trees},
        "build": spec.identity(),
        "toolchain": toolchain.identity(spec.mode),
        "dependencies": {"packages": list(spec.packages), "sources": sources.identity()},
    }
    if fetchcontent:  # sgl-kernel's pre-seeded FetchContent sources are compiled into it
        d["fetchcontent"] = {k: _dir_identity(v) for k, v in sorted(fetchcontent.items())}
    return d


def env_key(trees: Sequence[AppliedTree], spec: BuildSpec, toolchain: Toolchain,
            sources: PipSources | None = None, *,
            fetchcontent: Mapping[str, Path] | None = None) -> str:
    """sha256 (hex) of the canonical JSON of `key_inputs`."""
    inputs = key_inputs(trees, spec, toolchain, sources, fetchcontent=fetchcontent)
    return hashlib.sha256(canonical_json(inputs).encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# The env value
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Env:
    """A published env: `path` holds a venv whose manifest is `manifest`."""

    key: str
    path: Path
    python: Path
    manifest: dict
    reused: bool

    @property
    def name(self) -> str:
        return self.key[:KEY_LEN]

    @property
    def spec(self) -> BuildSpec:
        return BuildSpec.from_dict(self.manifest["spec"])

    @property
    def jit_dir(self) -> Path:
        return self.path / "jit"

    def run_vars(self) -> dict[str, str]:
        """The variables that launching something in this env sets (on top of the caller's)."""
        return run_vars(self.path, self.spec, self.manifest.get("toolchain", {}).get("cuda_home"),
                        self.key)

    def run_environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A complete environment for launching a process in this env (server, benchmark)."""
        from toolkit.build import scrubbed_environ

        # ambient FLASHINFER_*/NVCC_*/TORCH_CUDA_ARCH_LIST... would change run-time JIT builds
        env = scrubbed_environ(os.environ if base is None else base)
        extra = self.run_vars()
        extra["PATH"] = extra["PATH"] + os.pathsep + env.get("PATH", os.defpath)
        env.update(extra)
        return env


def run_vars(path: Path, spec: BuildSpec, cuda_home: str | None, key: str) -> dict[str, str]:
    from toolkit.build import flashinfer_arch_list, torch_arch_list

    v = {
        "PATH": str(path / "bin"),
        "VIRTUAL_ENV": str(path),
        "PYTHONNOUSERSITE": "1",
        "FLASHINFER_WORKSPACE_BASE": str(path / "jit"),
        "PATCHBENCH_ENV_KEY": key,
    }
    if spec.arch:
        v["FLASHINFER_CUDA_ARCH_LIST"] = flashinfer_arch_list(spec.arch)
        v["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(spec.arch)
    if cuda_home:
        v["CUDA_HOME"] = cuda_home
    v.update(dict(spec.env))
    return v


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write atomically (tmp file + rename): a reader sees the old or the new manifest."""
    tmp = path / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(_jsonable(manifest), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path / MANIFEST)


def _load_published(final: Path, key: str) -> dict | None:
    manifest = read_manifest(final)
    if manifest is None:
        return None
    if manifest.get("key") != key:
        raise PatchbenchError(
            f"env directory {final} holds key {manifest.get('key')}, not {key} (a key-prefix "
            "collision or a hand-edited env)", hint="remove that directory")
    if not (final / "bin" / "python").exists():
        return None
    return manifest


def _lock(home: Path, key: str) -> FileLock:
    locks = home / "envs" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{key[:KEY_LEN]}.lock"), thread_local=False)


def _record_use(final: Path, home: Path, key: str, recipe: str | None, *,
                locked: bool = False) -> dict:
    """Add the recipe to the manifest's users and bump last_used_at (under the key's lock)."""
    if not locked:
        with _lock(home, key):
            return _record_use(final, home, key, recipe, locked=True)
    manifest = read_manifest(final) or {}
    recipes = list(manifest.get("recipes", []))
    if recipe and recipe not in recipes:
        recipes.append(recipe)
    manifest["recipes"] = recipes
    manifest["last_used_at"] = _now()
    write_manifest(final, manifest)
    return manifest


def find_env(home: Path, key: str) -> Env | None:
    """The published env with this full key, or None (never a partial build)."""
    final = Path(home) / "envs" / key[:KEY_LEN]
    manifest = _load_published(final, key)
    if manifest is None:
        return None
    return Env(key=key, path=final, python=final / "bin" / "python", manifest=manifest,
               reused=True)


# --------------------------------------------------------------------------------------------
# ensure_env: the lifecycle
# --------------------------------------------------------------------------------------------


def _console(console):
    if console is not None:
        return console
    from rich.console import Console

    return Console(stderr=True)


def ensure_env(
    trees: Sequence[AppliedTree],
    spec: BuildSpec,
    home: Path,
    *,
    recipe: str | None = None,
    console=None,
    fetchcontent: Mapping[str, Path] | None = None,
) -> Env:
    """Return the env for (trees, spec): the published one with the same key, or a new build.

    A build runs in `envs/.tmp-<key16>-<pid>/` under the key's lock and is published by one
    `os.rename` after its manifest is written; a crash or kill -9 leaves only the `.tmp-` dir,
    which no reader ever uses and the next build of that key (or `env gc`) removes.
    """
    home = Path(home).expanduser().resolve()
    console = _console(console)
    validate_spec(spec, trees)
    t0 = time.monotonic()
    sources = pip_sources()
    toolchain = probe_toolchain(spec)
    inputs = key_inputs(trees, spec, toolchain, sources, fetchcontent=fetchcontent)
    key = hashlib.sha256(canonical_json(inputs).encode()).hexdigest()
    envs_dir = home / "envs"
    final = envs_dir / key[:KEY_LEN]

    if _load_published(final, key) is not None:
        manifest = _record_use(final, home, key, recipe)
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: reused (same key; nothing built, "
                      f"{time.monotonic() - t0:.1f} s)")
        return Env(key, final, final / "bin" / "python", manifest, reused=True)

    envs_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(home, key)
    try:
        lock.acquire(timeout=1)
    except Timeout:
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: another process is building it; waiting")
        lock.acquire()
    try:
        if _load_published(final, key) is not None:  # built while we waited
            manifest = _record_use(final, home, key, recipe, locked=True)
            console.print(f"env [bold]{key[:KEY_LEN]}[/]: reused (built by another process)")
            return Env(key, final, final / "bin" / "python", manifest, reused=True)
        if final.exists():  # an unpublishable leftover (no manifest): never used, replace it
            _remove_tree(final)
        for stale in envs_dir.glob(f".tmp-{key[:KEY_LEN]}-*"):  # we hold the lock: all stale
            console.print(f"env {key[:KEY_LEN]}: removing interrupted build {stale.name}")
            _remove_tree(stale)
        tmp = envs_dir / f".tmp-{key[:KEY_LEN]}-{os.getpid()}"
        console.print(f"env [bold]{key[:KEY_LEN]}[/]: building ({spec.mode} mode, "
                      f"Python {toolchain.python['version']}) in {tmp}")
        try:
            manifest = _build(tmp, key, inputs, trees, spec, toolchain, sources, home, recipe,
                              console, fetchcontent)
            manifest["timings"]["total"] = round(time.monotonic() - t0, 3)
            write_manifest(tmp, manifest)  # last: the env is complete
            os.rename(tmp, final)  # publish
        except BaseException as e:
            _salvage_failure(tmp, envs_dir, key, e)
            raise
    finally:
        lock.release()
    console.print(f"env [bold]{key[:KEY_LEN]}[/]: built in {time.monotonic() - t0:.1f} s -> {final}")
    return Env(key, final, final / "bin" / "python", manifest, reused=False)


def _salvage_failure(tmp: Path, envs_dir: Path, key: str, err: BaseException) -> None:
    """Keep the failed build's logs (the error points at them), drop the rest."""
    if not tmp.exists():
        return
    failed = envs_dir / f".failed-{key[:KEY_LEN]}-{os.getpid()}"
    try:
        if failed.exists():
            _remove_tree(failed)
        if (tmp / "logs").is_dir():
            failed.mkdir(parents=True)
            os.rename(tmp / "logs", failed / "logs")
            if isinstance(err, PatchbenchError) and err.log:
                log = Path(err.log)
                try:
                    err.log = failed / "logs" / log.relative_to(tmp / "logs")
                except ValueError:
                    pass
    finally:
        _remove_tree(tmp)


def _remove_tree(path: Path) -> None:
    """Remove a directory tree; a symlink or file is unlinked (never followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():  # read-only files: make them writable and retry
            for root, dirs, files in os.walk(path):
                for n in dirs + files:
                    try:
                        os.chmod(os.path.join(root, n), 0o700)
                    except OSError:
                        pass
            shutil.rmtree(path, ignore_errors=True)


def uv_cache_dir(home: Path) -> Path:
    """uv's cache: the default one (shared with the user's uv) if on home's filesystem, so that
    installs hardlink; otherwise `home/uv-cache`. UV_CACHE_DIR wins when set."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    default = Path(xdg) / "uv"

    def device(p: Path) -> int | None:
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            return p.stat().st_dev
        except OSError:
            return None

    return default if device(default) == device(home) else home / "uv-cache"


def _build(tmp: Path, key: str, inputs: dict, trees: Sequence[AppliedTree], spec: BuildSpec,
           toolchain: Toolchain, sources: PipSources, home: Path, recipe: str | None, console,
           fetchcontent: Mapping[str, Path] | None) -> dict:
    """The build as a list of named steps; each returns what the manifest records."""
    from toolkit import build

    tmp.mkdir(parents=True)
    steps = build.Steps(tmp, console, recipe=recipe)
    ctx = build.BuildContext(
        root=tmp, home=home, spec=spec, toolchain=toolchain, sources=sources, steps=steps,
        uv=toolchain.uv, uv_cache=uv_cache_dir(home), console=console,
        fetchcontent=dict(fetchcontent or {}),
    )
    created_at = _now()
    build.create_venv(ctx)
    selected = build.select_trees(trees, spec)
    if build.needs_flashinfer_check(selected, spec) and spec.mode == "overlay":
        build.check_no_flashinfer_aot(ctx, toolchain.python["executable"], where="base_python")
    installed = build.install_trees(ctx, selected)
    if build.needs_flashinfer_check(selected, spec):
        build.check_no_flashinfer_aot(ctx, str(ctx.python), where="env")
    cuda = build.compile_cuda_sources(ctx, trees) if spec.cuda else {}
    kernels = build.build_flashinfer_kernels(ctx, spec.kernels) if spec.kernels else {}
    verification = build.verify_env(ctx, kernels=kernels)
    packages = build.freeze(ctx)
    build.cleanup_build_dir(ctx)
    now = _now()
    return {
        "schema": SCHEMA,
        "key": key,
        "name": key[:KEY_LEN],
        "recipes": [recipe] if recipe else [],
        "created_at": created_at,
        "last_used_at": now,
        "published_at": now,
        "inputs": inputs,
        "spec": spec.to_dict(),
        "mode": spec.mode,
        "trees": [t.to_dict() for t in trees],
        "python": {"version": toolchain.python["version"],
                   "interpreter": toolchain.python["real_executable"],
                   "implementation": toolchain.python["implementation"]},
        "base": ({"python": toolchain.python["executable"],
                  "site_dirs": toolchain.python["site_dirs"],
                  "packages": toolchain.python["dists"],
                  "torch": toolchain.python["torch"]} if spec.mode == "overlay" else None),
        "toolchain": ctx.toolchain_record(),
        "arch": list(spec.arch),
        "env_vars": dict(spec.env),
        "pip_sources": {"origin": list(sources.origin), **sources.identity()},
        "installed": installed,
        "packages": packages,
        "cuda": cuda,
        "kernels": kernels,
        "verification": verification,
        "logs": dict(steps.logs),
        "timings": dict(steps.timings),
        "uv_cache": str(ctx.uv_cache),
    }


# --------------------------------------------------------------------------------------------
# list / gc
# --------------------------------------------------------------------------------------------


def disk_usage(paths: Iterable[Path], seen: set | None = None) -> int:
    """Bytes on disk under `paths`, each inode counted once (hardlinks shared across envs and
    with uv's cache are not counted twice); symlinks are not followed."""
    seen = set() if seen is None else seen
    total = 0
    for root in paths:
        root = Path(root)
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames + filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, n))
                except OSError:
                    continue
                ident = (st.st_dev, st.st_ino)
                if ident in seen:
                    continue
                seen.add(ident)
                total += st.st_blocks * 512
    return total


def unique_usage(path: Path) -> int:
    """Bytes only this env holds: files with a single link (what removing the env frees)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for n in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            if st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


@dataclass
class EnvInfo:
    """One row of `env list`."""

    name: str
    path: Path
    manifest: dict = field(repr=False)

    @property
    def key(self) -> str:
        return self.manifest.get("key", self.name)

    @property
    def recipes(self) -> list[str]:
        return list(self.manifest.get("recipes", []))

    def last_used(self) -> datetime | None:
        for k in ("last_used_at", "published_at", "created_at"):
            if self.manifest.get(k):
                try:
                    return datetime.fromisoformat(self.manifest[k])
                except ValueError:
                    pass
        return None

    def packages_of_note(self) -> list[str]:
        note = ("torch", "sglang", "flashinfer-python", "sgl-kernel", "flashinfer-jit-cache")
        out = []
        pkgs = list(self.manifest.get("packages", []))
        if self.manifest.get("base"):
            pkgs += [p + " (base)" for p in self.manifest["base"].get("packages", [])]
        for line in pkgs:
            name = re.split(r"[=@ ]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
            if name in note:
                out.append(line.split(" @ ")[0] if " @ " not in line else f"{name} (local)")
        return out


def list_envs(home: Path) -> list[EnvInfo]:
    """Published envs (directories with a manifest), most recently used first."""
    envs_dir = Path(home) / "envs"
    if not envs_dir.is_dir():
        return []
    out = []
    for p in envs_dir.iterdir():
        if p.name.startswith(".") or not p.is_dir():
            continue
        manifest = read_manifest(p)
        if manifest is not None:
            out.append(EnvInfo(p.name, p, manifest))
    epoch = datetime.fromtimestamp(0, timezone.utc)
    return sorted(out, key=lambda e: e.last_used() or epoch, reverse=True)


@dataclass
class GcResult:
    removed: list[str] = field(default_factory=list)  # env names
    kept: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # .tmp-/.failed-/.trash- dirs removed
    freed_bytes: int = 0


def _processes_using(paths: Sequence[Path]) -> set[Path]:
    """Envs that a running process was started from (its argv names a file inside the env)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return set()
    prefixes = [(p, str(p) + os.sep) for p in paths]
    busy: set[Path] = set()
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == me:
            continue
        for arg in proc.info.get("cmdline") or ():
            for p, pre in prefixes:
                if arg.startswith(pre):
                    busy.add(p)
    return busy


def gc_envs(home: Path, *, older_than_days: float | None = None,
            keep_recipes: Sequence[str] = (), dry_run: bool = False,
            now: datetime | None = None) -> GcResult:
    """Remove envs nobody needs, and every stale build directory.

    An env is removed when it is not protected (used by a recipe in `keep_recipes`) and expired:
    with `older_than_days`, unused for that long; otherwise, with `keep_recipes`, any env those
    recipes do not use; with neither, only envs that no recipe ever used. Envs a running process
    was launched from are kept. `.tmp-*` dirs whose key's lock is free (no build running) and
    `.failed-*`/`.trash-*` dirs are removed.
    """
    home = Path(home).expanduser().resolve()
    envs_dir = home / "envs"
    result = GcResult()
    if not envs_dir.is_dir():
        return result
    now = now or datetime.now(timezone.utc)
    keep = set(keep_recipes)

    for p in sorted(envs_dir.iterdir()):
        m = re.match(r"^\.(tmp|failed|trash)-([0-9a-f]+)-", p.name)
        if not m:
            continue
        if m.group(1) == "tmp":
            lock = FileLock(str(envs_dir / ".locks" / f"{m.group(2)}.lock"), thread_local=False)
            try:
                lock.acquire(timeout=0)
            except (Timeout, RuntimeError):  # RuntimeError: held in this very thread
                continue  # a build of that key is running: its .tmp dir is live
            try:
                if not dry_run:
                    result.freed_bytes += unique_usage(p)
                    _remove_tree(p)
            finally:
                lock.release()
        elif not dry_run:
            result.freed_bytes += unique_usage(p)
            _remove_tree(p)
        result.stale.append(p.name)

    infos = list_envs(home)
    busy = _processes_using([i.path for i in infos])
    for info in infos:
        recipes = set(info.recipes)
        if recipes & keep:
            result.kept.append(info.name)
            continue
        if older_than_days is not None:
            last = info.last_used()
            expired = last is None or (now - last).total_seconds() > older_than_days * 86400
        elif keep:
            expired = True
        else:
            expired = not recipes
        if not expired:
            result.kept.append(info.name)
            continue
        if info.path in busy:
            result.in_use.append(info.name)
            continue
        if not dry_run:
            lock = _lock(home, info.key)
            try:
                lock.acquire(timeout=0)
            except (Timeout, RuntimeError):
                result.in_use.append(info.name)
                continue
            try:
                trash = envs_dir / f".trash-{info.name}-{os.getpid()}"
                os.rename(info.path, trash)  # unpublish atomically, then delete
                result.freed_bytes += unique_usage(trash)
                _remove_tree(trash)
            finally:
                lock.release()
        result.removed.append(info.name)
    return result
