"""Test-wide fixtures come from kplane's own pytest plugin (the ``pytest11`` entry point
of the installed package: testing/plugin.py)."""

from hypothesis import settings

# Tests never assert on wall-clock time: hypothesis's per-example deadline is off.
settings.register_profile("kplane", deadline=None)
settings.load_profile("kplane")
