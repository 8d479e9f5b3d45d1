"""minisglang: a miniature of sglang honouring the part of its CLI/HTTP contract patchbench uses.

Standard library only. See ../README.md (upstream/minisglang/README.md) for the contract.
"""

from sglang.version import __version__

__all__ = ["__version__"]
