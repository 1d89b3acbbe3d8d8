"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kplane.common.certs import PkiFiles, create_test_pki


@pytest.fixture
def pki(tmp_path: Path) -> PkiFiles:
    """A CA, a broker certificate for localhost and 127.0.0.1, and a client certificate."""
    return create_test_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
