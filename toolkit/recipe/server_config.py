"""`[server.args] config = "FILE.yaml"`: sglang's own server-args file, read into the recipe's arguments.

sglang 0.5.23's `--config FILE` takes a YAML mapping of options (srt/utils/server_args_config_parser.py:
a .yaml/.yml file, checked at :155-160; each key becomes `--key value`, a list `--key v1 v2`, a mapping its
JSON, a store_true `true` the bare flag and `false` nothing; :163-208) inserted before the command line's
own arguments, so the command line wins (:94-106). Passed through as a path, the file's options were
invisible to patchbench: the static check parsed `--config` as a string (sglang's parser merges the file
only in prepare_server_args, srt/server_args.py:683-689), the release rules and `[expect]` never saw its
values, and the run identity held its path, not its content (an edited file read as the same configuration).

So the file is read when the recipe loads (a relative path is relative to the recipe file that names it):
its options become the recipe's `[server.args]`, the recipe's own arguments winning as the command line
does, and the server gets them as flags: the static check, `/server_info` verification, the identity and
`show` all see them. A file sglang 0.5.23 would refuse (not .yaml/.yml, missing, not a mapping) is refused here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput

KEY = "config"


def file_args(recipe: Path, location: Any) -> list[tuple[str, Any]]:
    """(flag, value) pairs of the server-args file `location` named by `recipe`'s `[server.args] config`."""
    import yaml

    where = f"{recipe}: `server.args.config`"
    if not isinstance(location, str) or not location:
        raise BadInput(f"{where} must name a YAML file of sglang server options, not {location!r}")
    path = Path(location)
    path = path if path.is_absolute() else recipe.parent / path
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise BadInput(f"{where}: {path} is not a .yaml/.yml file, which sglang's --config requires "
                       "(srt/utils/server_args_config_parser.py)", hint="write the options as YAML, or in [server.args]")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{where}: cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInput(f"{where}: {path} is not valid YAML: {' '.join(str(exc).split())[:200]}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise BadInput(f"{where}: {path} must hold a mapping of option -> value at its root, as sglang's --config "
                       f"requires (found {type(data).__name__})")
    out = []
    for key, value in data.items():
        flag = str(key).lstrip("-").replace("_", "-")
        if flag == KEY:
            raise BadInput(f"{where}: {path} names another config file (`{key}`): sglang reads one")
        if isinstance(value, dict):
            value = json.dumps(value)
        elif isinstance(value, list):
            value = tuple(str(v) for v in value)
        out.append((flag, value))
    return out


def merged(recipe: Path, args: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """`args` with a `config` entry replaced by its file's options; the recipe's own arguments win."""
    location = next((v for f, v in args if f == KEY), None)
    if location is None:
        return args
    own = [(f, v) for f, v in args if f != KEY]
    given = {f for f, _ in own}
    return [(f, v) for f, v in file_args(recipe, location) if f not in given] + own
