"""pip's configured package sources (pip.conf files and PIP_* variables), handed to uv, which does
not read pip's configuration; their identity is part of the env key."""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from toolkit.errors import BadInput


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
