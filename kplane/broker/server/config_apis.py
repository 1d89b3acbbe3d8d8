"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for brokers and topics (KIP-226),
groups (KIP-848, KIP-932) and client-metrics subscriptions (KIP-714).

A broker resource is ``"<id>"`` (that broker's dynamic configs) or ``""`` (the cluster
default); a topic resource is the topic's overrides at ``/config/topics/<name>``; a group
resource (type 32) the group's configs at ``/config/groups/<group>``; a client-metrics
resource (type 16) a subscription at ``/config/client-metrics/<name>``. Invalid
changes answer INVALID_CONFIG with a message that says what to do instead; nothing of a
refused resource is stored.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from kplane.broker.config.definitions import CONFIGS, ConfigType
from kplane.broker.config.dynamic_config import DEFAULT_ENTITY, DynamicBrokerConfig
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.listener_key import base_name
from kplane.broker.config.listeners import listener_names, normalise
from kplane.broker.config.topic_configs import TOPIC_CONFIGS, validate_topic_configs
from kplane.broker.group.group_configs import (
    GROUP_CONFIGS,
    GROUPS,
    GroupConfigManager,
    group_node,
)
from kplane.broker.metadata.cache import MetadataCache
from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.server.config_describer import (
    ConfigDescriber,
    ConfigEntry,
    client_metrics_entries,
    group_entries,
    topic_default,
)
from kplane.broker.server.context import Handler, RequestContext
from kplane.broker.telemetry import subscriptions
from kplane.common.acl import AclOperation, AclResourceType
from kplane.common.config_ops import ConfigResourceType, OpType
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class AlterConfigPolicyRequest:
    """What an ``alter.config.policy.class.name`` policy's ``validate`` is given."""

    resource_type: str  # "TOPIC", "BROKER" or "GROUP"
    resource_name: str
    configs: Mapping[str, str]


Policy = Callable[[AlterConfigPolicyRequest], None]


def load_policy(path: str | None) -> Policy | None:
    """An instance's ``validate`` of the class at ``module.Class``; ConfigException if absent."""
    if not path:
        return None
    module_name, _, class_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigException(
            f"alter.config.policy.class.name: cannot import {path}: {exc}",
            name="alter.config.policy.class.name",
        ) from exc
    validate: Policy = cls().validate
    return validate


class ConfigApis:
    """The three config APIs over the broker's DynamicBrokerConfig and topic overrides."""

    def __init__(
        self,
        dynamic: DynamicBrokerConfig,
        client: KafkaMetadataClient,
        cache: MetadataCache,
        policy: Policy | None = None,
        group_configs: GroupConfigManager | None = None,
    ) -> None:
        self.dynamic = dynamic
        self.client = client
        self.cache = cache
        self.policy = policy
        self.group_configs = group_configs or GroupConfigManager(lambda: dynamic.current)
        self.describer = ConfigDescriber(dynamic)

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe,
            ApiKey.ALTER_CONFIGS: self.handle_alter,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter,
        }

    # DescribeConfigs -----------------------------------------------------------------
    def handle_describe(self, ctx: RequestContext) -> None:
        body = ctx.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        docs = bool(getattr(body, "include_documentation", False))
        results = []
        for resource in body.resources:
            rtype, name = int(resource.resource_type), resource.resource_name
            keys = resource.configuration_keys
            try:
                entries = self._describe(ctx, rtype, name, keys, docs)
                error, message = ErrorCode.none, None
            except KafkaError as exc:
                entries, error, message = [], exc.code, exc.message
            results.append(
                ctx.make(
                    "DescribeConfigsResult",
                    error_code=error,
                    error_message=message,
                    resource_type=rtype,
                    resource_name=name,
                    configs=tuple(self._entry(ctx, e, synonyms) for e in entries),
                )
            )
        ctx.respond(ctx.make_response(results=tuple(results)))

    def _describe(
        self, ctx: RequestContext, rtype: int, name: str, keys: Any, docs: bool
    ) -> list[ConfigEntry]:
        if rtype == ConfigResourceType.TOPIC:
            if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.topic_authorization_failed, None)
            if self.cache.topic(name) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {name} not found")
            overrides = self.client.get_entity_config("topics", name)
            return self.describer.topic_entries(overrides, keys, docs)
        if rtype == ConfigResourceType.BROKER:
            if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER):
                raise KafkaError(ErrorCode.cluster_authorization_failed, None)
            if name not in ("", str(self.dynamic.broker_id)):
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {self.dynamic.broker_id} or empty "
                    f"string, but received {name}",
                )
            return self.describer.broker_entries(name != "", keys, docs)
        if rtype == ConfigResourceType.GROUP:
            if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.GROUP, name):
                raise KafkaError(ErrorCode.group_authorization_failed, None)
            overrides = self.client.get_entity_config(GROUPS, group_node(name))
            return group_entries(overrides, self.group_configs.default, keys, docs)
        if rtype == ConfigResourceType.CLIENT_METRICS:
            if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER):
                raise KafkaError(ErrorCode.cluster_authorization_failed, None)
            if not name:
                raise KafkaError(
                    ErrorCode.invalid_request, "Client metrics subscription name must not be empty"
                )
            node = subscriptions.subscription_node(name)
            stored = self.client.get_entity_config(subscriptions.CLIENT_METRICS, node)
            return client_metrics_entries(stored, keys)
        raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {rtype}")

    @staticmethod
    def _entry(ctx: RequestContext, entry: ConfigEntry, with_synonyms: bool) -> Any:
        return ctx.make(
            "DescribeConfigsResourceResult",
            name=entry.name,
            value=entry.value,
            read_only=entry.read_only,
            config_source=int(entry.source),
            is_sensitive=entry.sensitive,
            synonyms=tuple(
                ctx.make("DescribeConfigsSynonym", name=s.name, value=s.value, source=int(s.source))
                for s in entry.synonyms
            )
            if with_synonyms
            else (),
            config_type=entry.type_code,
            documentation=entry.documentation,
        )

    # AlterConfigs / IncrementalAlterConfigs ------------------------------------------
    def handle_alter(self, ctx: RequestContext) -> None:
        """The legacy API: each resource's dynamic configs become exactly the given set."""

        def new_configs(_current: dict[str, str], resource: Any) -> dict[str, str]:
            out = {}
            for c in resource.configs:
                if c.value is None:
                    raise KafkaError(
                        ErrorCode.invalid_request, f"Null value not supported for : {c.name}"
                    )
                out[c.name] = c.value
            return out

        self._alter(ctx, new_configs)

    def handle_incremental_alter(self, ctx: RequestContext) -> None:
        def new_configs(current: dict[str, str], resource: Any) -> dict[str, str]:
            out = dict(current)
            names = [c.name for c in resource.configs]
            for c in resource.configs:
                if names.count(c.name) > 1:
                    raise KafkaError(
                        ErrorCode.invalid_request,
                        f"Error due to duplicate config keys: {c.name}",
                    )
                apply_op(out, c.name, int(c.config_operation), c.value, int(resource.resource_type))
            return out

        self._alter(ctx, new_configs)

    def _alter(
        self, ctx: RequestContext, new_configs: Callable[[dict[str, str], Any], dict[str, str]]
    ) -> None:
        validate_only = bool(ctx.body.validate_only)
        ids = [(int(r.resource_type), r.resource_name) for r in ctx.body.resources]
        responses = []
        for resource in ctx.body.resources:
            rtype, name = int(resource.resource_type), resource.resource_name
            try:
                if ids.count((rtype, name)) > 1:
                    raise KafkaError(
                        ErrorCode.invalid_request, "Each resource must appear at most once."
                    )
                self._alter_resource(ctx, rtype, name, resource, new_configs, validate_only)
                error, message = ErrorCode.none, None
            except KafkaError as exc:
                error, message = exc.code, exc.message
            except ConfigException as exc:
                error, message = ErrorCode.invalid_config, str(exc)
            if error is not ErrorCode.none:
                log.info(
                    "config change refused",
                    resource=f"{rtype}:{name}",
                    error=error.name,
                    reason=message,
                )
            responses.append(
                ctx.make(
                    "AlterConfigsResourceResponse",
                    error_code=error,
                    error_message=message,
                    resource_type=rtype,
                    resource_name=name,
                )
            )
        ctx.respond(ctx.make_response(responses=tuple(responses)))

    def _alter_resource(
        self,
        ctx: RequestContext,
        rtype: int,
        name: str,
        resource: Any,
        new_configs: Callable[[dict[str, str], Any], dict[str, str]],
        validate_only: bool,
    ) -> None:
        if rtype == ConfigResourceType.TOPIC:
            if not ctx.authorized(AclOperation.ALTER_CONFIGS, AclResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.topic_authorization_failed, None)
            if self.cache.topic(name) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {name} not found")
            configs = new_configs(self.client.get_entity_config("topics", name), resource)
            validate_topic_configs(configs)
            self._check_policy("TOPIC", name, configs)
            if not validate_only:
                self.client.set_entity_config("topics", name, configs)
                log.info("topic configs altered", topic=name, keys=sorted(configs))
            return
        if rtype == ConfigResourceType.BROKER:
            if not ctx.authorized(AclOperation.ALTER_CONFIGS, AclResourceType.CLUSTER):
                raise KafkaError(ErrorCode.cluster_authorization_failed, None)
            if name and not (name.isascii() and name.isdigit()):
                raise KafkaError(ErrorCode.invalid_request, f"Invalid broker id {name}")
            entity = name or DEFAULT_ENTITY
            configs = new_configs(self.dynamic.entity_configs(entity), resource)
            self._check_listener_removal(ctx, configs if entity != DEFAULT_ENTITY else None)
            self._check_policy("BROKER", name, configs)
            if validate_only:
                self.dynamic.validate(entity, configs)
            else:
                self.dynamic.alter(entity, configs)
            return
        if rtype == ConfigResourceType.GROUP:
            if not ctx.authorized(AclOperation.ALTER_CONFIGS, AclResourceType.GROUP, name):
                raise KafkaError(ErrorCode.group_authorization_failed, None)
            if not name:
                raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
            configs = new_configs(self.client.get_entity_config(GROUPS, group_node(name)), resource)
            self.group_configs.validate(configs)
            self._check_policy("GROUP", name, configs)
            if not validate_only:
                self.client.set_entity_config(GROUPS, group_node(name), configs)
                log.info("group configs altered", group=name, keys=sorted(configs))
            return
        if rtype == ConfigResourceType.CLIENT_METRICS:
            if not ctx.authorized(AclOperation.ALTER_CONFIGS, AclResourceType.CLUSTER):
                raise KafkaError(ErrorCode.cluster_authorization_failed, None)
            node = subscriptions.subscription_node(name)
            configs = new_configs(
                self.client.get_entity_config(subscriptions.CLIENT_METRICS, node), resource
            )
            subscriptions.validate(name, configs)
            self._check_policy("CLIENT_METRICS", name, configs)
            if not validate_only:
                self.client.set_entity_config(subscriptions.CLIENT_METRICS, node, configs)
                log.info("client metrics subscription altered", name=name, keys=sorted(configs))
            return
        raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {rtype}")

    def _check_listener_removal(
        self, ctx: RequestContext, configs: Mapping[str, str] | None
    ) -> None:
        """The listener a request came in on cannot be removed by that request."""
        if configs is None or "listeners" not in configs:
            return
        if normalise(ctx.listener_name) not in listener_names(configs["listeners"]):
            raise ConfigException(
                f"listeners: cannot remove listener {ctx.listener_name}, the request arrived "
                "on it; send the change through another listener",
                name="listeners",
            )

    def _check_policy(self, rtype: str, name: str, configs: Mapping[str, str]) -> None:
        if self.policy is None:
            return
        try:
            self.policy(AlterConfigPolicyRequest(rtype, name, dict(configs)))
        except Exception as exc:
            raise KafkaError(ErrorCode.policy_violation, str(exc) or type(exc).__name__) from exc


def apply_op(configs: dict[str, str], name: str, op: int, value: str | None, rtype: int) -> None:
    """One IncrementalAlterConfigs operation on an entity's configs (Kafka's
    ``prepareIncrementalConfigs``): APPEND and SUBTRACT start from the current value, else
    the config's default."""
    try:
        kind = OpType(op)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request, f"Unknown operations type {op}") from None
    if kind is OpType.DELETE:
        configs.pop(name, None)
        return
    if value is None:
        raise KafkaError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
    if kind is OpType.SET:
        configs[name] = value
        return
    verb = "append" if kind is OpType.APPEND else "subtract"
    if rtype == ConfigResourceType.GROUP:
        group_definition = GROUP_CONFIGS.get(name)
        if group_definition is None:
            raise KafkaError(ErrorCode.invalid_config, f"Unknown group config name: {name}")
        ctype, default = group_definition.type, None
    elif rtype == ConfigResourceType.CLIENT_METRICS:
        if name not in subscriptions.CONFIG_NAMES:
            raise KafkaError(
                ErrorCode.invalid_config, f"Unknown client metrics configuration: {name}"
            )
        if name not in subscriptions.LIST_CONFIGS:
            raise KafkaError(
                ErrorCode.invalid_config,
                f"Config value {verb} is not allowed for config key: {name}",
            )
        ctype, default = ConfigType.LIST, ""
    elif rtype == ConfigResourceType.TOPIC:
        topic_definition = TOPIC_CONFIGS.get(name)
        if topic_definition is None:
            raise KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
        ctype, default = topic_definition.type, topic_default(topic_definition)
    else:
        definition = CONFIGS.get(base_name(name))
        if definition is None:
            raise KafkaError(ErrorCode.invalid_config, f"Unknown config name: {name}")
        ctype, default = definition.type, definition.default_text
    if ctype is not ConfigType.LIST:
        raise KafkaError(
            ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {name}"
        )
    current = configs.get(name, default) or ""
    items = [v for v in current.split(",") if v]
    changes = [v.strip() for v in value.split(",") if v.strip()]
    if kind is OpType.APPEND:
        items += [v for v in changes if v not in items]
    else:
        items = [v for v in items if v not in changes]
    configs[name] = ",".join(items)
