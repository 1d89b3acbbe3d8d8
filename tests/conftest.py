"""Test-wide fixtures come from kplane's own pytest plugin."""

from hypothesis import settings

pytest_plugins = ["testing.plugin"]

# Tests never assert on wall-clock time: hypothesis's per-example deadline is off.
settings.register_profile("kplane", deadline=None)
settings.load_profile("kplane")
