"""patchbench: reproducible, comparable, bisectable sglang/FlashInfer experiments.

Data flows one way: recipe -> tree -> env -> run -> store -> analysis.
"""

__version__ = "0.1.0"
