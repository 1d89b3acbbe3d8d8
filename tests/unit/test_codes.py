"""Codes off the wire: known ones map to their member, others to UNKNOWN."""

from __future__ import annotations

from kplane.broker.security.scram import ScramMechanismType
from kplane.common.acl import AclOperation
from kplane.protocol.codes import from_wire


def test_from_wire() -> None:
    assert from_wire(ScramMechanismType, 2) is ScramMechanismType.SCRAM_SHA_512
    assert from_wire(ScramMechanismType, 77) is ScramMechanismType.UNKNOWN
    assert from_wire(AclOperation, int(AclOperation.WRITE)) is AclOperation.WRITE
    assert from_wire(AclOperation, -3) is AclOperation.UNKNOWN


def test_api_keys_are_kio_and_the_controller_schemas() -> None:
    from kplane.protocol import api
    from kplane.protocol.api_keys import ApiKey

    assert {k.value: k.name.lower() for k in ApiKey} == api.API_NAMES
