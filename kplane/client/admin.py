"""Admin: topic, cluster, offset, config, SCRAM and ACL administration over KafkaClient.

Requests Kafka's AdminClient sends to the controller (CreateTopics, DeleteTopics,
CreatePartitions) go to ``client.cluster.controller_id`` when it is known, else to the least
loaded broker; a NOT_CONTROLLER answer refreshes metadata and retries those topics. Config
requests about one broker go to that broker. Everything else goes to any broker.

Results are per item: ``None`` for success, or a :class:`protocol.errors.KafkaError` carrying
the broker's code and message. A broker that does not serve an API at all makes the call
raise :class:`common.network.connection.UnsupportedApi` naming the API.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

from kplane.client.consumer import list_offsets as _list_offsets
from kplane.client.kafka_client import BrokerNode, KafkaClient, PartitionMetadata

# The ACL and config types of Admin's methods: its callers import them from here.
from kplane.common.acl import AclBinding as AclBinding
from kplane.common.acl import AclBindingFilter as AclBindingFilter
from kplane.common.acl import AclOperation as AclOperation
from kplane.common.acl import AclPermissionType as AclPermissionType
from kplane.common.acl import AclResourceType as AclResourceType
from kplane.common.acl import PatternType as PatternType
from kplane.common.acl_requests import acl_binding, creation_fields, filter_fields
from kplane.common.config_ops import ConfigResourceType as ConfigResourceType
from kplane.common.config_ops import OpType as OpType
from kplane.common.network.connection import UnsupportedApi
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

T = TypeVar("T")


EARLIEST = -2
"""``list_offsets`` timestamp: the log start offset."""
LATEST = -1
"""``list_offsets`` timestamp: the high watermark."""
MAX_TIMESTAMP = -3
"""``list_offsets`` timestamp: the record with the largest timestamp."""

_CONTROLLER_ATTEMPTS = 3


# values ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NewTopic:
    """A topic to create; -1 takes the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class TopicDescription:
    """A topic as Metadata describes it: its id and partitions, or its error."""

    name: str
    topic_id: Any
    internal: bool
    partitions: tuple[PartitionMetadata, ...]
    error: KafkaError | None


@dataclass(frozen=True)
class ClusterDescription:
    """What DescribeCluster answered."""

    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True)
class ConfigResource:
    """A topic (``TOPIC``, name) or a broker (``BROKER``, its id; "" for the cluster
    default)."""

    type: ConfigResourceType
    name: str


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource as DescribeConfigs answered it."""

    name: str
    value: str | None
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: int = 0
    documentation: str | None = None


@dataclass(frozen=True)
class ResourceConfig:
    """The configs of one resource, or the error that prevented describing it."""

    error: KafkaError | None
    entries: Mapping[str, ConfigEntry]


@dataclass(frozen=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs change (``value`` is ignored for DELETE)."""

    name: str
    value: str | None = None
    op: OpType = OpType.SET


class ScramMechanism(IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


_SCRAM_HASHES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class UserScramCredentials:
    """The SCRAM credentials of one user, or the error describing them."""

    error: KafkaError | None
    credentials: tuple[ScramCredentialInfo, ...]


@dataclass(frozen=True)
class ScramUpsertion:
    """Create or replace ``user``'s credential for ``mechanism``; the password is salted and
    hashed here (SCRAM's Hi(), PBKDF2-HMAC) and never sent."""

    user: str
    mechanism: ScramMechanism
    password: bytes | str
    iterations: int = 4096
    salt: bytes | None = None

    def salted_password(self, salt: bytes) -> bytes:
        hash_name = _SCRAM_HASHES.get(ScramMechanism(self.mechanism))
        if hash_name is None:
            raise ValueError(f"{self.user}: unknown SCRAM mechanism {self.mechanism!r}")
        password = (
            self.password.encode("utf-8") if isinstance(self.password, str) else self.password
        )
        return hashlib.pbkdf2_hmac(hash_name, password, salt, self.iterations)


@dataclass(frozen=True)
class ScramDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: ScramMechanism


@dataclass(frozen=True)
class DeleteAclsResult:
    """What one filter deleted, each ACL with its own error, or the filter's error."""

    error: KafkaError | None
    matches: tuple[tuple[AclBinding, KafkaError | None], ...]


def _error(code: ErrorCode, message: str | None = None) -> KafkaError | None:
    return None if code == ErrorCode.none else KafkaError(code, message)


def _raise_for(response: Any) -> None:
    """Raise the top-level error of a response that carries one."""
    if response.error_code != ErrorCode.none:
        raise KafkaError(response.error_code, response.error_message)


def _api_title(api_key: int) -> str:
    name = api.API_NAMES.get(api_key, str(api_key))
    return "".join(word.title() for word in name.split("_"))


# the client --------------------------------------------------------------------------------
class Admin:
    """Administration calls over a (shared, started) KafkaClient."""

    def __init__(self, client: KafkaClient, *, retry_backoff_ms: int = 100) -> None:
        self.client = client
        self.retry_backoff_ms = retry_backoff_ms

    # plumbing ------------------------------------------------------------------------
    async def _request(
        self, node: int | None, api_key: int, build: Callable[[int], Any], what: str
    ) -> Any:
        try:
            return await self.client.request(node, api_key, build)
        except UnsupportedApi as exc:
            raise UnsupportedApi(
                f"Admin.{what} needs the {_api_title(api_key)} API (key {api_key}), "
                f"which the broker does not serve: {exc}"
            ) from exc

    async def _call(
        self,
        node: int | None,
        api_key: int,
        what: str,
        fields: Callable[[Any], Mapping[str, Any]],
    ) -> Any:
        """Send ``api_key`` to ``node``; ``fields(module)`` gives the request's values from
        the request module of the version negotiated."""

        def build(version: int) -> Any:
            module = api.request_module(api_key, version)
            return api.make(api.request_class(api_key, version), **fields(module))

        return await self._request(node, api_key, build, what)

    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.client.config.request_timeout_ms)

    async def _controller(self) -> int | None:
        """The controller's id when metadata names a live one, else None (any broker)."""
        cluster = self.client.cluster
        if not cluster.brokers:
            cluster = await self.client.refresh_metadata()
        controller = cluster.controller_id
        return controller if controller >= 0 and controller in cluster.brokers else None

    async def _to_controller(
        self,
        names: Sequence[str],
        send: Callable[[list[str], int | None], Awaitable[dict[str, KafkaError | None]]],
    ) -> dict[str, KafkaError | None]:
        """Run ``send`` for ``names`` against the controller; topics answered NOT_CONTROLLER
        are sent again after a metadata refresh."""
        results: dict[str, KafkaError | None] = {}
        pending = list(dict.fromkeys(names))
        for attempt in range(_CONTROLLER_ATTEMPTS):
            answered = await send(pending, await self._controller())
            results.update(answered)
            pending = [
                n
                for n, e in answered.items()
                if e is not None and e.code == ErrorCode.not_controller
            ]
            if not pending or attempt == _CONTROLLER_ATTEMPTS - 1:
                break
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)
            await self.client.refresh_metadata()
        return results

    async def _topics_to_controller(
        self,
        api_key: int,
        what: str,
        names: Iterable[str],
        fields: Callable[[Any, list[str]], Mapping[str, Any]],
        answers: Callable[[Any], Iterable[Any]],
    ) -> dict[str, KafkaError | None]:
        """A per-topic controller request: ``fields(module, names)`` builds it for the topics
        still pending, ``answers(response)`` lists its per-topic results."""

        async def send(wanted: list[str], node: int | None) -> dict[str, KafkaError | None]:
            response = await self._call(node, api_key, what, lambda m: fields(m, wanted))
            return {
                r.name: _error(r.error_code, getattr(r, "error_message", None))
                for r in answers(response)
                if r.name in wanted
            }

        return await self._to_controller(list(names), send)

    # topics --------------------------------------------------------------------------
    async def create_topics(
        self, topics: Iterable[NewTopic], validate_only: bool = False
    ) -> dict[str, KafkaError | None]:
        """Create ``topics``; name -> None when created (or valid, with ``validate_only``)."""
        by_name = {t.name: t for t in topics}

        def fields(module: Any, names: list[str]) -> dict[str, Any]:
            return dict(
                topics=tuple(
                    api.make(
                        module.CreatableTopic,
                        name=t.name,
                        num_partitions=t.num_partitions if not t.assignments else -1,
                        replication_factor=t.replication_factor if not t.assignments else -1,
                        assignments=tuple(
                            api.make(
                                module.CreatableReplicaAssignment,
                                partition_index=p,
                                broker_ids=tuple(replicas),
                            )
                            for p, replicas in sorted((t.assignments or {}).items())
                        ),
                        configs=tuple(
                            api.make(module.CreatableTopicConfig, name=k, value=v)
                            for k, v in t.configs.items()
                        ),
                    )
                    for t in (by_name[n] for n in names)
                ),
                timeout=self._timeout(),
                validate_only=validate_only,
            )

        return await self._topics_to_controller(
            ApiKey.CREATE_TOPICS, "create_topics", by_name, fields, lambda r: r.topics
        )

    async def delete_topics(self, names: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete topics by name; name -> None when deleted."""

        def fields(module: Any, wanted: list[str]) -> dict[str, Any]:
            return dict(
                topic_names=tuple(wanted),
                topics=tuple(
                    api.make(module.DeleteTopicState, name=n, topic_id=None) for n in wanted
                ),
                timeout=self._timeout(),
            )

        return await self._topics_to_controller(
            ApiKey.DELETE_TOPICS, "delete_topics", names, fields, lambda r: r.responses
        )

    async def create_partitions(
        self,
        counts: Mapping[str, int],
        validate_only: bool = False,
        assignments: Mapping[str, Sequence[Sequence[int]]] | None = None,
    ) -> dict[str, KafkaError | None]:
        """Grow each topic to ``counts[topic]`` partitions; name -> None when done.

        ``assignments`` optionally gives the replicas of each new partition."""
        chosen = dict(assignments or {})

        def fields(module: Any, names: list[str]) -> dict[str, Any]:
            return dict(
                topics=tuple(
                    api.make(
                        module.CreatePartitionsTopic,
                        name=n,
                        count=counts[n],
                        assignments=tuple(
                            api.make(module.CreatePartitionsAssignment, broker_ids=tuple(r))
                            for r in chosen[n]
                        )
                        if n in chosen
                        else None,
                    )
                    for n in names
                ),
                timeout=self._timeout(),
                validate_only=validate_only,
            )

        return await self._topics_to_controller(
            ApiKey.CREATE_PARTITIONS, "create_partitions", counts, fields, lambda r: r.results
        )

    # cluster -------------------------------------------------------------------------
    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and brokers, as DescribeCluster answers them."""

        response = await self._call(
            None,
            ApiKey.DESCRIBE_CLUSTER,
            "describe_cluster",
            lambda _: dict(
                include_cluster_authorized_operations=False,
                endpoint_type=1,
                include_fenced_brokers=False,
            ),
        )
        _raise_for(response)
        brokers = tuple(
            sorted(
                (
                    BrokerNode(int(b.broker_id), b.host, int(b.port), b.rack)
                    for b in response.brokers
                ),
                key=lambda b: b.node_id,
            )
        )
        return ClusterDescription(response.cluster_id, int(response.controller_id), brokers)

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Metadata of ``names`` (None: every topic), creating none, sorted by name."""
        wanted = None if names is None else list(dict.fromkeys(names))

        def fields(module: Any) -> dict[str, Any]:
            topics = (
                None
                if wanted is None
                else tuple(api.make(module.MetadataRequestTopic, name=n) for n in wanted)
            )
            return dict(
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )

        response = await self._call(None, ApiKey.METADATA, "describe_topics", fields)
        out = [
            TopicDescription(
                str(t.name),
                getattr(t, "topic_id", None),
                bool(t.is_internal),
                tuple(
                    sorted(
                        (PartitionMetadata.of(p) for p in t.partitions),
                        key=lambda p: p.partition,
                    )
                ),
                _error(t.error_code),
            )
            for t in response.topics
        ]
        return sorted(out, key=lambda t: t.name)

    async def delete_records(
        self, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | KafkaError]:
        """DeleteRecords (API 21) at each partition's leader: records before the offset
        (-1: the high watermark) go. ``(topic, partition)`` -> the new low watermark, or
        the partition's error."""
        cluster = await self.client.refresh_metadata(
            sorted({t for t, _ in offsets}), allow_auto_create=False
        )
        results: dict[tuple[str, int], int | KafkaError] = {}
        by_leader: dict[int, dict[tuple[str, int], int]] = {}
        for tp, offset in offsets.items():
            meta = cluster.topics.get(tp[0], {}).get(tp[1])
            if meta is None or meta.leader < 0:
                code = cluster.topic_errors.get(tp[0], ErrorCode.unknown_topic_or_partition)
                if code == ErrorCode.none:
                    code = ErrorCode.unknown_topic_or_partition
                results[tp] = KafkaError(code, f"{tp[0]}-{tp[1]}: {code.name}")
                continue
            by_leader.setdefault(meta.leader, {})[tp] = offset

        async def send(leader: int, wanted: dict[tuple[str, int], int]) -> None:
            topics: dict[str, list[tuple[int, int]]] = {}
            for (topic, partition), offset in wanted.items():
                topics.setdefault(topic, []).append((partition, offset))

            def fields(module: Any) -> dict[str, Any]:
                return dict(
                    topics=tuple(
                        api.make(
                            module.DeleteRecordsTopic,
                            name=topic,
                            partitions=tuple(
                                api.make(
                                    module.DeleteRecordsPartition, partition_index=p, offset=o
                                )
                                for p, o in parts
                            ),
                        )
                        for topic, parts in topics.items()
                    ),
                    timeout=self._timeout(),
                )

            response = await self._call(leader, ApiKey.DELETE_RECORDS, "delete_records", fields)
            for t in response.topics:
                for p in t.partitions:
                    tp = (str(t.name), int(p.partition_index))
                    error = _error(p.error_code)
                    results[tp] = error if error is not None else int(p.low_watermark)

        await asyncio.gather(*(send(leader, w) for leader, w in by_leader.items()))
        return results

    # offsets -------------------------------------------------------------------------
    async def list_offsets(
        self, wanted: Mapping[tuple[str, int], int], isolation_level: int = 0
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): timestamp}`` -> ``{(topic, partition): (offset, timestamp)}``
        from each partition's leader. Timestamps: :data:`EARLIEST`, :data:`LATEST`,
        :data:`MAX_TIMESTAMP` or milliseconds (the first offset at or after it; -1 when
        there is none). A topic the metadata does not know raises KafkaError
        (UNKNOWN_TOPIC_OR_PARTITION) at once; other retriable errors are retried until
        ``request.timeout.ms``; the rest raise KafkaError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.client.config.request_timeout_ms / 1000.0
        pending = dict(wanted)
        found: dict[tuple[str, int], tuple[int, int]] = {}
        while True:
            results = await _list_offsets(self.client, pending, isolation_level)
            retry: dict[tuple[str, int], int] = {}
            for tp, result in results.items():
                if result.error == ErrorCode.none:
                    found[tp] = (result.offset, result.timestamp)
                elif (
                    result.error.retriable
                    and loop.time() < deadline
                    and tp[0] in self.client.cluster.topics
                ):
                    retry[tp] = pending[tp]
                else:
                    raise KafkaError(
                        result.error, f"ListOffsets for {tp[0]}-{tp[1]}: {result.error.name}"
                    )
            if not retry:
                return found
            pending = retry
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)
            await self.client.refresh_metadata(
                sorted({t for t, _ in pending}), allow_auto_create=False
            )

    # configs -------------------------------------------------------------------------
    def _config_node(self, resource: ConfigResource) -> int | None:
        """Broker resources go to that broker; topics and the cluster default to any."""
        broker = resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
        if not broker or not resource.name:
            return None
        try:
            return int(resource.name)
        except ValueError:
            raise ValueError(
                f"{resource.type.name} resource name {resource.name!r} is not a broker id"
            ) from None

    async def _per_node(
        self,
        resources: Iterable[ConfigResource],
        send: Callable[[int | None, list[ConfigResource]], Awaitable[dict[ConfigResource, T]]],
    ) -> dict[ConfigResource, T]:
        groups: dict[int | None, list[ConfigResource]] = {}
        for resource in resources:
            groups.setdefault(self._config_node(resource), []).append(resource)
        answers = await asyncio.gather(*(send(node, rs) for node, rs in groups.items()))
        merged: dict[ConfigResource, T] = {}
        for answer in answers:
            merged.update(answer)
        return merged

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, ResourceConfig]:
        """Every config of each resource, with its source (and synonyms when asked)."""

        async def send(
            node: int | None, group: list[ConfigResource]
        ) -> dict[ConfigResource, ResourceConfig]:
            def fields(module: Any) -> dict[str, Any]:
                return dict(
                    resources=tuple(
                        api.make(
                            module.DescribeConfigsResource,
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configuration_keys=None,
                        )
                        for r in group
                    ),
                    include_synonyms=include_synonyms,
                    include_documentation=include_documentation,
                )

            response = await self._call(node, ApiKey.DESCRIBE_CONFIGS, "describe_configs", fields)
            out: dict[ConfigResource, ResourceConfig] = {}
            for result in response.results:
                resource = ConfigResource(
                    ConfigResourceType(int(result.resource_type)), result.resource_name
                )
                entries = {
                    c.name: ConfigEntry(
                        name=c.name,
                        value=c.value,
                        source=int(getattr(c, "config_source", ConfigSource.UNKNOWN)),
                        read_only=bool(c.read_only),
                        is_sensitive=bool(c.is_sensitive),
                        synonyms=tuple(
                            ConfigSynonym(s.name, s.value, int(s.source))
                            for s in getattr(c, "synonyms", ())
                        ),
                        config_type=int(getattr(c, "config_type", 0)),
                        documentation=getattr(c, "documentation", None),
                    )
                    for c in result.configs
                }
                out[resource] = ResourceConfig(
                    _error(result.error_code, result.error_message), entries
                )
            return out

        return await self._per_node(resources, send)

    async def _alter_configs(
        self,
        api_key: int,
        what: str,
        resources: Iterable[ConfigResource],
        validate_only: bool,
        configs: Callable[[Any, ConfigResource], Iterable[Any]],
    ) -> dict[ConfigResource, KafkaError | None]:
        """AlterConfigs or IncrementalAlterConfigs, one request per broker;
        ``configs(module, resource)`` builds the AlterableConfig entries of a resource."""

        async def send(
            node: int | None, group: list[ConfigResource]
        ) -> dict[ConfigResource, KafkaError | None]:
            def fields(module: Any) -> dict[str, Any]:
                return dict(
                    resources=tuple(
                        api.make(
                            module.AlterConfigsResource,
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configs=tuple(configs(module, r)),
                        )
                        for r in group
                    ),
                    validate_only=validate_only,
                )

            response = await self._call(node, api_key, what, fields)
            return _resource_errors(response.responses)

        return await self._per_node(resources, send)

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str | None]],
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaError | None]:
        """Replace each resource's dynamic configs with ``configs[resource]`` (the legacy
        AlterConfigs: configs left out return to their defaults)."""
        return await self._alter_configs(
            ApiKey.ALTER_CONFIGS,
            "alter_configs",
            configs,
            validate_only,
            lambda module, r: (
                api.make(module.AlterableConfig, name=k, value=v) for k, v in configs[r].items()
            ),
        )

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaError | None]:
        """Apply SET/DELETE/APPEND/SUBTRACT operations to each resource's configs."""
        ops = {r: list(c) for r, c in changes.items()}
        return await self._alter_configs(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            "incremental_alter_configs",
            ops,
            validate_only,
            lambda module, r: (
                api.make(
                    module.AlterableConfig,
                    name=op.name,
                    config_operation=int(op.op),
                    value=None if op.op == OpType.DELETE else op.value,
                )
                for op in ops[r]
            ),
        )

    # SCRAM ---------------------------------------------------------------------------
    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, UserScramCredentials]:
        """The SCRAM mechanisms and iterations of ``users`` (None: every user)."""
        names = None if users is None else list(users)

        response = await self._call(
            None,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            "describe_user_scram_credentials",
            lambda module: dict(
                users=None
                if names is None
                else tuple(api.make(module.UserName, name=n) for n in names)
            ),
        )
        _raise_for(response)
        return {
            r.user: UserScramCredentials(
                _error(r.error_code, r.error_message),
                tuple(
                    ScramCredentialInfo(ScramMechanism(int(c.mechanism)), int(c.iterations))
                    for c in r.credential_infos
                ),
            )
            for r in response.results
        }

    async def alter_user_scram_credentials(
        self, alterations: Iterable[ScramUpsertion | ScramDeletion]
    ) -> dict[str, KafkaError | None]:
        """Upsert or delete SCRAM credentials; user -> None when every change to it held."""
        changes = list(alterations)
        upsertions = []
        for change in changes:
            if isinstance(change, ScramUpsertion):
                salt = change.salt if change.salt is not None else secrets.token_bytes(32)
                upsertions.append((change, salt, change.salted_password(salt)))

        def fields(module: Any) -> dict[str, Any]:
            return dict(
                deletions=tuple(
                    api.make(
                        module.ScramCredentialDeletion, name=c.user, mechanism=int(c.mechanism)
                    )
                    for c in changes
                    if isinstance(c, ScramDeletion)
                ),
                upsertions=tuple(
                    api.make(
                        module.ScramCredentialUpsertion,
                        name=c.user,
                        mechanism=int(c.mechanism),
                        iterations=c.iterations,
                        salt=salt,
                        salted_password=salted,
                    )
                    for c, salt, salted in upsertions
                ),
            )

        response = await self._call(
            None, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "alter_user_scram_credentials", fields
        )
        results: dict[str, KafkaError | None] = {}
        for r in response.results:
            error = _error(r.error_code, r.error_message)
            results[r.user] = results.get(r.user) or error
        return results

    # ACLs ----------------------------------------------------------------------------
    async def create_acls(self, bindings: Iterable[AclBinding]) -> list[KafkaError | None]:
        """Create ``bindings``; one result per binding, in order."""
        wanted = list(bindings)

        def fields(module: Any) -> dict[str, Any]:
            return dict(
                creations=tuple(
                    api.make(module.AclCreation, **creation_fields(b)) for b in wanted
                ),
            )

        response = await self._call(None, ApiKey.CREATE_ACLS, "create_acls", fields)
        return [_error(r.error_code, r.error_message) for r in response.results]

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (every ACL by default)."""
        f = acl_filter or AclBindingFilter()

        response = await self._call(
            None, ApiKey.DESCRIBE_ACLS, "describe_acls", lambda _: filter_fields(f)
        )
        _raise_for(response)
        return [
            acl_binding(resource, acl) for resource in response.resources for acl in resource.acls
        ]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[DeleteAclsResult]:
        """Delete the ACLs each filter matches; one result per filter, in order."""
        wanted = list(filters)

        response = await self._call(
            None,
            ApiKey.DELETE_ACLS,
            "delete_acls",
            lambda module: dict(
                filters=tuple(
                    api.make(module.DeleteAclsFilter, **filter_fields(f)) for f in wanted
                )
            ),
        )
        return [
            DeleteAclsResult(
                _error(r.error_code, r.error_message),
                tuple(
                    (acl_binding(m, m), _error(m.error_code, m.error_message))
                    for m in r.matching_acls
                ),
            )
            for r in response.filter_results
        ]


def _resource_errors(responses: Iterable[Any]) -> dict[ConfigResource, KafkaError | None]:
    return {
        ConfigResource(ConfigResourceType(int(r.resource_type)), r.resource_name): _error(
            r.error_code, r.error_message
        )
        for r in responses
    }
