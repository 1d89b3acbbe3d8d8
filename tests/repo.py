"""Where the repository lies, for tests that run its configs and commands."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
