"""`patchbench schema`: the JSON Schema of recipe files, for editors (Even Better TOML / taplo)."""

from __future__ import annotations

from toolkit.commands.common import print_json
from toolkit.recipe.schema import json_schema

HELP = ("print the JSON Schema of recipe TOML files (point your editor at it: "
        "`#:schema ./recipe.schema.json` in taplo / Even Better TOML)")


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", default=None, help="write to this file instead of stdout")


def run(args) -> int:
    schema = json_schema()
    if args.output:
        import json
        from pathlib import Path

        Path(args.output).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        return 0
    print_json(schema, versioned=False)  # a JSON Schema document as editors read it
    return 0
