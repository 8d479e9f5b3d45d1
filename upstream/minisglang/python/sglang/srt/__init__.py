"""The sglang runtime (miniature)."""
