"""Launch the (miniature) sglang server: `python -m sglang.launch_server --model-path P ...`."""

import sys

from sglang.srt.entrypoints.http_server import launch_server
from sglang.srt.server_args import prepare_server_args

if __name__ == "__main__":
    server_args = prepare_server_args(sys.argv[1:])
    launch_server(server_args)
