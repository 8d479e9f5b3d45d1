"""The `patchbench` command: verbs only. Each verb lives in toolkit/commands/<verb>.py."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from rich.console import Console

from toolkit import __version__
from toolkit.errors import PatchbenchError

# verb -> module under toolkit.commands (one concept each).
VERBS = {
    "show": "show",
    "schema": "schema",
    "apply": "apply",
    "patches": "patches",
    "build": "build",
    "env": "env",
    "run": "run",
    "plan": "plan",
    "sweep": "sweep",
    "results": "results",
    "import": "import_results",
    "compare": "compare",
    "attribute": "attribute",
    "bisect": "bisect",
    "track": "track",
    "history": "history",
    "report": "report",
    "publish": "publish",
    "roofline": "roofline",
    "profile": "profile",
    "kernels": "kernels",
    "doctor": "doctor",
}

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        err_console.print(f"error: {self.prog}: {message}", markup=False)
        raise SystemExit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser. `only`: the verb being run, the one whose module (and all it imports:
    up to 0.5 CPU-s of a verb's start) is loaded; the others stay names (choices, not help)."""
    parser = _Parser(prog="patchbench", description="Reproducible, comparable, bisectable sglang/FlashInfer experiments.")
    parser.add_argument("--version", action="version", version=f"patchbench {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for verb, module_name in VERBS.items():
        if only is not None and verb != only:
            sub.add_parser(verb)
            continue
        if only is None and (text := _help_text(module_name)) is not None:  # the verb list: no module loaded
            sub.add_parser(verb, help=text.replace("%", "%%"), description=text)
            continue
        try:
            module = importlib.import_module(f"toolkit.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"toolkit.commands.{module_name}":
                continue
            raise
        # argparse %-formats a `help` string (the verb list), never a `description`
        p = sub.add_parser(verb, help=module.HELP.replace("%", "%%"), description=module.HELP)
        p.add_argument("--home", default=None, help="workspace (default $PATCHBENCH_HOME or ~/.cache/patchbench)")
        p.add_argument("--store", default=None, metavar="PATH|URL",
                       help="results store: a SQLite file or a postgresql:// URL (default $PATCHBENCH_STORE, "
                            "the config's [store] url, else HOME/results.sqlite)")
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _help_text(module_name: str) -> str | None:
    """A verb module's `HELP` read from its source (a literal string), without importing the module and all it
    imports (`patchbench --help` loaded every verb: 0.8 CPU-s); None when it is not a literal there."""
    import ast
    from pathlib import Path

    path = Path(__file__).resolve().parent / "commands" / f"{module_name}.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELP" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
    return None


def unknown_arguments(parser: argparse.ArgumentParser, verb: str, extra: list[str]) -> None:
    """The one-line error of arguments `verb` does not take (exit 2), with a "did you mean"."""
    import difflib

    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = verbs.choices[verb]
    options = [o for a in sub._actions for o in a.option_strings]
    close = difflib.get_close_matches(extra[0].split("=", 1)[0], options, n=1) if extra[0].startswith("-") else []
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {close[0]}?)" if close else ""))


# verbs that launch servers and store runs: an interrupt of one leaves the runs it finished stored
RUNNING_VERBS = frozenset({"run", "sweep", "attribute", "bisect", "track", "compare", "profile", "kernels"})


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    try:  # Ctrl-C while the verbs' modules load: one line too, no traceback
        parser = build_parser(args_in[0] if args_in and args_in[0] in VERBS else None)
        args, extra = parser.parse_known_args(argv)
    except KeyboardInterrupt:
        err_console.print("error: interrupted", markup=False)
        return 130
    if extra:  # named by the verb that refused them, with the closest option it has
        unknown_arguments(parser, args.verb, extra)
    # `--home` is the workspace for everything the command reaches, including what resolves its
    # place from the environment (a recipe's tiny:<name> model, the child processes it starts)
    saved_home = os.environ.get("PATCHBENCH_HOME")
    if getattr(args, "home", None):
        os.environ["PATCHBENCH_HOME"] = str(Path(args.home).expanduser().resolve())
    try:
        return int(args._run(args) or 0)
    except PatchbenchError as exc:
        err_console.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        from toolkit.errors import Interrupted

        fixed = getattr(args, "repeats", None) is not None or getattr(args, "fixed", False)
        again = ("a fixed design (--repeats/--fixed) launches all its repeats again: without them the sequential "
                 "design counts the stored runs" if fixed else "the same command again counts them")
        err_console.print(f"error: {exc}" if isinstance(exc, Interrupted) else
                          f"error: interrupted (runs that finished are stored; {again})" if args.verb in RUNNING_VERBS
                          else "error: interrupted", markup=False)
        return 143 if exc.args and exc.args[0] == "SIGTERM" else 130  # 128 + the signal, as shells report it
    except Exception as exc:  # a bug: one line here, the traceback in a file
        from toolkit.errors import disk_error
        from toolkit.workspace import default_home

        refused = disk_error(exc, default_home()) if isinstance(exc, OSError) else None
        if refused is not None:  # the disk said no (permission, read-only, full): no bug, no traceback file
            err_console.print(f"error: patchbench {args.verb}: {refused}", markup=False)
            return refused.exit_code
        import traceback

        from toolkit.workspace import default_home

        log = default_home() / "last-error.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(traceback.format_exc())
        except OSError:
            log = None
        err_console.print(f"error: internal error in patchbench {args.verb}: {type(exc).__name__}: {exc}"
                          + (f" [traceback: {log}]" if log else ""), markup=False)
        return 1
    finally:
        if saved_home is None:
            os.environ.pop("PATCHBENCH_HOME", None)
        else:
            os.environ["PATCHBENCH_HOME"] = saved_home


if __name__ == "__main__":
    sys.exit(main())
