"""Tiny models patchbench writes itself (seeded weights, a locally trained tokenizer): what real
sglang serves on a CPU. `tiny.ensure(name)` writes one once, cached under $PATCHBENCH_HOME/models."""
