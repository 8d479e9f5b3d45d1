"""The published site's frame (pure): where each page lives (`Site` paths, one file name per recipe
that any file system and web server keep), the navigation bar with links relative to the page, and
the page shell (a plain HTML document, styles inline, no script, no external resource)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from toolkit.report.tables import esc

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em; color: #222; }
nav { font-size: 13px; margin-bottom: 1em; } nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.faster { color: #1a7f37; font-weight: bold; } .slower { color: #cf222e; font-weight: bold; }
.note { color: #666; font-size: 12px; }
img.plot { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
"""


def slug(name: str) -> str:
    """A file name for a recipe or pair: the name's safe characters, plus a short hash of the name
    when any were replaced (so `a/b` and `a_b` never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "recipe"
    if safe == name:
        return safe
    return f"{safe[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Site:
    """Relative paths of the site's pages (POSIX, from the site's root)."""

    @staticmethod
    def recipe(name: str) -> str:
        return f"recipes/{slug(name)}.html"

    @staticmethod
    def recipe_assets(name: str) -> str:
        return f"recipes/{slug(name)}"

    @staticmethod
    def compare(base: str, variant: str) -> str:
        return f"compare/{slug(base + '--' + variant)}.html"

    @staticmethod
    def compare_assets(base: str, variant: str) -> str:
        return f"compare/{slug(base + '--' + variant)}"

    @staticmethod
    def history(name: str) -> str:
        return f"history/{slug(name)}.html"

    @staticmethod
    def history_assets(name: str) -> str:
        return f"history/{slug(name)}"

    @staticmethod
    def sweep(base: str) -> str:
        return f"sweeps/{slug(base)}.html"

    @staticmethod
    def sweep_assets(base: str) -> str:
        return f"sweeps/{slug(base)}"


def rel(from_page: str, target: str) -> str:
    """`target` (a path from the site's root) as a link from `from_page` (both POSIX paths)."""
    depth = from_page.count("/")
    return "../" * depth + target


def link(from_page: str, target: str, text: str) -> str:
    return f'<a href="{esc(rel(from_page, target))}">{esc(text)}</a>'


def nav(page: str, title: str = "patchbench results") -> str:
    return f'<nav>{link(page, "index.html", title)}</nav>'


def shell(page: str, title: str, body: str) -> str:
    """A whole page: the navigation back to the index, the title, `body` (HTML)."""
    return ("<!DOCTYPE html>\n" '<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n{nav(page)}\n"
            f"<h1>{esc(title)}</h1>\n{body}\n</body></html>\n")
