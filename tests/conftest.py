"""Test-wide fixtures come from kplane's own pytest plugin."""

pytest_plugins = ["broker.testing.plugin"]
