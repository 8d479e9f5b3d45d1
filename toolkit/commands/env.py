"""`patchbench env list` / `patchbench env gc`: the isolated envs under PATCHBENCH_HOME/envs."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

HELP = "list the isolated envs (key, recipes, size, age) or garbage-collect unused ones"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="env_command", metavar="COMMAND")
    sub.required = True
    lst = sub.add_parser("list", help="one row per env: key, recipes that used it, size, age")
    lst.add_argument("--json", action="store_true", help="print the rows as JSON")
    gc = sub.add_parser("gc", help="remove interrupted builds, and envs no recipe ever used (--older-than: unused "
                                   "for DAYS; --keep-recipes: all but those recipes' envs)")
    gc.add_argument("--older-than", type=float, metavar="DAYS", default=None,
                    help="remove envs not used for DAYS days")
    gc.add_argument("--keep-recipes", nargs="+", metavar="RECIPE", default=[],
                    help="never remove envs these recipes used; without --older-than, remove "
                         "every other env")
    gc.add_argument("--dry-run", action="store_true", help="say what would be removed")
    for p in (lst, gc):  # `env list --home X` as well as `env --home X list`
        p.add_argument("--home", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _age(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "?"
    s = (now - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def run(args) -> int:
    from toolkit.commands.common import console, home_of, print_json
    from toolkit.envs import disk_usage, gc_envs, list_envs, unique_usage

    home = home_of(args)
    now = datetime.now(timezone.utc)
    if args.env_command == "list":
        rows = []
        for info in list_envs(home):
            m = info.manifest
            rows.append({
                "env": info.name,
                "key": info.key,
                "mode": m.get("mode", "?"),
                "recipes": info.recipes,
                "python": (m.get("python") or {}).get("version"),
                "arch": m.get("arch", []),
                "packages": info.packages_of_note(),
                "size_bytes": disk_usage([info.path]),
                "unique_bytes": unique_usage(info.path),
                "created_at": m.get("created_at"),
                "last_used_at": m.get("last_used_at"),
                "path": str(info.path),
                "_last": info.last_used(),
            })
        if args.json:
            print_json([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
            return 0
        if not rows:
            console.print(f"no envs under {home / 'envs'}")
            return 0
        from rich.table import Table

        table = Table(title=f"envs in {home / 'envs'}", title_justify="left")
        for col in ("env", "mode", "recipes", "python", "arch", "packages of note", "size",
                    "unique", "age", "last used"):
            table.add_column(col, justify="right" if col in ("size", "unique") else "left")
        for r in rows:
            created = datetime.fromisoformat(r["created_at"]) if r["created_at"] else None
            table.add_row(r["env"], r["mode"], ", ".join(dict.fromkeys(r["recipes"])) or "-", r["python"] or "?",
                          " ".join(r["arch"]) or "-", "\n".join(r["packages"]) or "-",
                          _size(r["size_bytes"]), _size(r["unique_bytes"]), _age(created, now),
                          _age(r["_last"], now) + " ago")
        console.print(table)
        console.print("[dim]size counts each hardlinked file once; unique is what removing the "
                      "env frees (files not shared with uv's cache or other envs)[/]")
        return 0

    _check_gc_arguments(home, args)
    result = gc_envs(home, older_than_days=args.older_than, keep_recipes=args.keep_recipes,
                     dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    console.print(f"{verb} {len(result.removed)} env(s){': ' + ', '.join(result.removed) if result.removed else ''}")
    if result.stale:
        console.print(f"{verb} {len(result.stale)} interrupted/failed build dir(s): "
                      + ", ".join(result.stale))
    if result.in_use:
        console.print(f"kept {len(result.in_use)} env(s) in use by a running process or build: "
                      + ", ".join(result.in_use))
    kept = len(result.kept) + len(result.in_use)
    console.print(f"kept {kept} env(s) in all" + (f" ({len(result.in_use)} in use)" if result.in_use else "")
                  + f"; {'would free' if args.dry_run else 'freed'} {_size(result.freed_bytes)}")
    return 0


def _check_gc_arguments(home, args) -> None:
    """A negative age, or a --keep-recipes name no env was built for and no recipe file has (a typo
    would protect nothing): BadInput before anything is removed."""
    from toolkit.commands.common import first_unknown
    from toolkit.envs.gc import list_envs
    from toolkit.errors import BadInput

    if args.older_than is not None and args.older_than < 0:
        raise BadInput(f"--older-than {args.older_than:g}: an age in days must be 0 or more")
    unknown = first_unknown(args.keep_recipes, {name for info in list_envs(home) for name in info.recipes})
    if unknown:
        raise BadInput(f"--keep-recipes {unknown[0]}: no env was built for it and no recipe has that name, so it "
                       "would protect nothing", hint=unknown[1])
