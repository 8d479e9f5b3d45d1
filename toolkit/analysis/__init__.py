"""Analysis over stored results: compare recipes, attribute a speedup to patches, bisect a stack.

`compare` reads the store; `attribute` and `bisect` are pure (values and callbacks in, dataclasses
out) so that the caller decides where measurements come from.
"""
