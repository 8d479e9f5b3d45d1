"""A package index as the sources and release bisect see it: the files and releases of a project.

Two kinds of index, the same answers:
- an HTTP(S) simple index (`https://pypi.org/simple`, PEP 691 JSON);
- a local one given as a `file://` URL or a path: a PEP 503 tree (`<root>/<project>/index.html`
  with `#sha256=` fragments) or a flat directory of wheels/sdists (pip's `--find-links` layout).
The index is `$PATCHBENCH_PYPI_INDEX` (default PyPI); the miniature's releases use a local one.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from toolkit.errors import BadInput, PatchbenchError
from toolkit.digest import sha256_file

DEFAULT_INDEX = "https://pypi.org/simple"


def index_url() -> str:
    return os.environ.get("PATCHBENCH_PYPI_INDEX", DEFAULT_INDEX)


def file_version(filename: str) -> Version | None:
    """The release a wheel or sdist file belongs to (None for other files)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((self._href, data.strip()))
            self._href = None


def _local_files(root: Path, name: str) -> list[dict]:
    page = root / canonicalize_name(name) / "index.html"
    if page.is_file():
        parser = _Links()
        parser.feed(page.read_text())
        files = []
        for href, text in parser.links:
            url, _, frag = href.partition("#")
            target = (page.parent / urllib.parse.unquote(url)).resolve()
            sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else sha256_file(target)
            files.append({"filename": text or target.name, "url": target.as_uri(), "hashes": {"sha256": sha}})
        return files
    want = canonicalize_name(name)
    files = []
    for f in sorted(root.glob("*")):
        base = re.split(r"-\d", f.name, maxsplit=1)[0]
        if f.is_file() and file_version(f.name) and canonicalize_name(base) == want:
            files.append({"filename": f.name, "url": f.resolve().as_uri(), "hashes": {"sha256": sha256_file(f)}})
    return files


def project_files(name: str, index: str | None = None) -> list[dict]:
    """[{filename, url, hashes: {sha256}, yanked?}] of a project; BadInput when the index has none."""
    index = index or index_url()
    local = Path(urllib.parse.urlparse(index).path) if index.startswith("file://") else (
        Path(index) if "://" not in index else None)
    if local is not None:
        files = _local_files(local, name)
        if not files:
            raise BadInput(f"no package `{name}` in the local index {local}")
        return files
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)["files"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise BadInput(f"no package `{name}` on {index}") from None
        raise PatchbenchError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PatchbenchError(f"cannot reach {url}: {exc}") from None


def releases(name: str, index: str | None = None, *, include_pre: bool = False) -> list[Version]:
    """Every release of `name` on the index with at least one file that is not yanked, in order."""
    found = set()
    for f in project_files(name, index):
        if f.get("yanked"):
            continue
        v = file_version(f["filename"])
        if v is not None and (include_pre or not (v.is_prerelease or v.is_devrelease)):
            found.add(v)
    return sorted(found)


def check_releases(name: str, versions: list[str], index: str | None = None) -> list[str]:
    """`versions` as given (an explicit --versions list), each one a release of `name` on the index;
    BadInput naming the first that is not (before anything is built or launched)."""
    try:
        parsed = [Version(v) for v in versions]
    except InvalidVersion as exc:
        raise BadInput(f"{exc}: --versions takes release versions such as 0.5.10.post1") from None
    known = releases(name, index, include_pre=any(v.is_prerelease for v in parsed))
    for text, v in zip(versions, parsed):
        if v not in known:
            close = [str(k) for k in known if k.major == v.major and k.minor == v.minor][-5:]
            raise BadInput(f"--versions {text}: `{name}` has no release {v} on {index or index_url()}",
                           hint=f"nearby: {', '.join(close)}" if close else None)
    return versions


def releases_between(name: str, good: str, bad: str, index: str | None = None) -> list[str]:
    """[good, r1, ..., bad]: the releases of `name` from good to bad inclusive, oldest first."""
    try:
        g, b = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise BadInput(f"{exc}: --good/--bad take release versions such as 0.5.10.post1") from None
    known = releases(name, index, include_pre=g.is_prerelease or b.is_prerelease)
    for v, flag in ((g, "--good"), (b, "--bad")):
        if v not in known:
            close = [str(k) for k in known if k.major == v.major and k.minor == v.minor][-5:]
            raise BadInput(f"{flag} {v}: `{name}` has no release {v} on {index or index_url()}",
                           hint=f"nearby: {', '.join(close)}" if close else None)
    if g == b:
        raise BadInput(f"--good and --bad are the same release ({g})")
    lo, hi = sorted((g, b))
    span = [str(v) for v in known if lo <= v <= hi]
    return span if g < b else span[::-1]
