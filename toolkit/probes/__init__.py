"""Standalone scripts run with an env's own interpreter (they import only the stdlib + the env)."""
