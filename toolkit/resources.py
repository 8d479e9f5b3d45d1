"""Where the package's own files live: data tables, probe scripts, and the project checkout around it."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"      # gpus.toml, kernel_families.toml, models/*.json
PROBES_DIR = PACKAGE_DIR / "probes"  # scripts run by an env's own interpreter
PROJECT_DIR = PACKAGE_DIR.parent     # the checkout (recipes/, patches/, upstream/) when installed editable
