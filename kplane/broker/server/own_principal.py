"""The principal this broker presents when it talks to itself and to other brokers, and the
start-up check that an authorizer lets that principal do so.

The controller, replica fetchers and transaction markers connect to
``control.plane.listener.name`` / ``inter.broker.listener.name`` as clients. With an
authorizer, Kafka expects that principal to hold ClusterAction (usually as a super user); if
it does not, the broker cannot send itself LeaderAndIsr or UpdateMetadata and Metadata lists
no brokers. kplane refuses such a start-up with one line instead.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import structlog

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.network.broker_channels import client_config_for
from kplane.broker.network.tls import ServerTls
from kplane.broker.security.authorizer import AclAuthorizer
from kplane.broker.security.principal_mapping import ANONYMOUS
from kplane.common.acl import CLUSTER_NAME, AclOperation, AclResourceType

log = structlog.get_logger(__name__)


def own_principal(config: KafkaConfig, tls: Mapping[str, ServerTls], endpoint: EndPoint) -> str:
    """``User:<name>`` this broker authenticates as on ``endpoint``'s listener: ANONYMOUS on
    PLAINTEXT (and on SSL without client authentication), its keystore certificate's subject
    after ``ssl.principal.mapping.rules`` on SSL, the login user of
    ``sasl.mechanism.inter.broker.protocol`` on SASL."""
    listener = endpoint.listener_name
    protocol = endpoint.security_protocol
    if protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
        client = client_config_for(config, listener, endpoint, "own-principal")
        try:
            return "User:" + client.sasl_credentials().username
        except ValueError as exc:
            raise ConfigException(
                f"inter-broker SASL login on listener {listener}: {exc}",
                name="sasl.jaas.config",
            ) from exc
    if protocol is SecurityProtocol.SSL:
        if str(config.listener_get(listener, "ssl.client.auth")) == "none":
            return ANONYMOUS
        server = tls[listener]
        return "User:" + server.mapper.get_name(server.certificate.subject.rfc4514_string())
    return ANONYMOUS


def _host_of(endpoint: EndPoint) -> str:
    """The address a connection to ``endpoint`` from this machine comes from."""
    host = endpoint.host or "127.0.0.1"
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return host
    return "127.0.0.1" if address == "0.0.0.0" else address


def _denied(
    config: KafkaConfig, tls: Mapping[str, ServerTls], authorizer: AclAuthorizer, name: str
) -> tuple[EndPoint, str] | None:
    """(endpoint, principal) when the broker's principal on listener ``name`` may not do
    ClusterAction under the loaded ACLs; None when it may."""
    endpoint = next(e for e in config.listeners if e.listener_name == name)
    principal = own_principal(config, tls, endpoint)
    allowed = authorizer.authorize(
        principal,
        _host_of(endpoint),
        AclOperation.CLUSTER_ACTION,
        AclResourceType.CLUSTER,
        CLUSTER_NAME,
    )
    return None if allowed else (endpoint, principal)


def check_can_reach_itself(
    config: KafkaConfig, tls: Mapping[str, ServerTls], authorizer: AclAuthorizer
) -> None:
    """ConfigException (one line) when the controller's listener (``control.plane.listener.name``,
    else ``inter.broker.listener.name``) would deny this broker's own principal ClusterAction;
    a warning when only the inter-broker listener of a separate control plane would (replica
    fetches and transaction markers of other brokers are then refused)."""
    controller_listener = config.control_plane_listener_name or config.inter_broker_listener_name
    denied = _denied(config, tls, authorizer, controller_listener)
    if denied is not None:
        endpoint, principal = denied
        raise ConfigException(
            f"the broker connects to its own listener {endpoint.listener_name} "
            f"({endpoint.security_protocol.value}) as {principal}, which the authorizer denies "
            f"ClusterAction: add {principal} to super.users (or grant it ClusterAction on the "
            "cluster), or use an inter-broker listener where the broker authenticates as a "
            "super user",
            name="super.users",
        )
    if controller_listener != config.inter_broker_listener_name:
        denied = _denied(config, tls, authorizer, config.inter_broker_listener_name)
        if denied is not None:
            endpoint, principal = denied
            log.warning(
                "inter-broker principal denied ClusterAction: other brokers' replica fetches "
                "and transaction markers will be refused",
                listener=endpoint.listener_name,
                principal=principal,
            )
