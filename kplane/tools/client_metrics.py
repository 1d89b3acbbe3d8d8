"""``kplane client-metrics``: client-metrics subscriptions (KIP-714), as
``kafka-client-metrics.sh``::

    kplane client-metrics --bootstrap-server H:P --alter --name N --metrics P1,P2|* \\
        --interval MS [--match client_id=REGEX,...]
    kplane client-metrics --bootstrap-server H:P --describe [--name N]
    kplane client-metrics --bootstrap-server H:P --delete --name N
    kplane client-metrics --bootstrap-server H:P --list

A subscription is a CLIENT_METRICS config resource: ``--alter`` sets its configs with
IncrementalAlterConfigs (an empty value deletes that config), ``--delete`` deletes every
config it has, ``--describe`` shows them through DescribeConfigs, and ``--list`` (and
``--describe`` without ``--name``) names them through ListClientMetricsResources.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from kplane.client.admin import Admin, AlterConfigOp, ConfigResource, ConfigResourceType, OpType
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.tools.admin_session import add_connection_args, run_admin

TOOL = "kplane client-metrics"
MATCH_SELECTORS = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)


def add_parser(sub: Any) -> None:
    """Register the ``client-metrics`` subcommand."""
    p = sub.add_parser(
        "client-metrics",
        help="manipulate and describe client metrics subscriptions (KIP-714)",
    )
    add_connection_args(p)
    p.add_argument("--alter", action="store_true", help="alter a client metrics resource")
    p.add_argument("--delete", action="store_true", help="delete a client metrics resource")
    p.add_argument("--describe", action="store_true", help="list a resource's configurations")
    p.add_argument("--list", action="store_true", help="list the client metrics resources")
    p.add_argument("--name", help="name of the client metrics configuration resource")
    p.add_argument("--generate-name", action="store_true", help="generate a UUID as the name")
    p.add_argument("--interval", type=int, help="the metrics push interval in milliseconds")
    p.add_argument(
        "--match",
        metavar="k1=v1,k2=v2",
        help="matching selectors, each a regular expression over one of: "
        + ", ".join(MATCH_SELECTORS),
    )
    p.add_argument("--metrics", metavar="m1,m2", help="telemetry metric name prefixes, or *")
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, as Kafka's ClientMetricsCommand says it."""
    actions = [a for a in ("alter", "delete", "describe", "list") if getattr(args, a)]
    if len(actions) != 1:
        return "Command must include exactly one action: --alter, --delete, --describe or --list."
    action = actions[0]
    settings = [
        f"--{o.replace('_', '-')}"
        for o in ("generate_name", "interval", "match", "metrics")
        if getattr(args, o) not in (None, False)
    ]
    if action in ("delete", "describe", "list") and settings:
        return f'Option "[{action}]" can\'t be used with option "{settings[0]}"'
    if action == "list" and args.name is not None:
        return 'Option "[list]" can\'t be used with option "--name"'
    if action == "alter" and (args.name is None) == (not args.generate_name):
        return "One of --name or --generate-name must be specified with --alter."
    if action == "delete" and args.name is None:
        return "A client metrics resource name must be specified with --delete."
    return None


def run(args: argparse.Namespace) -> int:
    problem = check_args(args)
    if problem is not None:
        print(f"{TOOL}: {problem}", file=sys.stderr)
        return 1
    if args.alter:
        return run_admin(TOOL, args, lambda admin: _alter(admin, args))
    if args.delete:
        return run_admin(TOOL, args, lambda admin: _delete(admin, args.name))
    if args.describe:
        return run_admin(TOOL, args, lambda admin: _describe(admin, args.name))
    return run_admin(TOOL, args, _list)


def _resource(name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.CLIENT_METRICS, name)


async def _change(admin: Admin, name: str, ops: list[AlterConfigOp]) -> None:
    error = (await admin.incremental_alter_configs({_resource(name): ops}))[_resource(name)]
    if error is not None:
        raise error


async def _alter(admin: Admin, args: argparse.Namespace) -> int:
    name = str(uuid.uuid4()) if args.generate_name else args.name
    configs: dict[str, str] = {}
    if args.interval is not None:
        configs["interval.ms"] = str(args.interval)
    if args.metrics is not None:
        configs["metrics"] = ",".join(m.strip() for m in args.metrics.split(","))
    if args.match is not None:
        configs["match"] = ",".join(m.strip() for m in args.match.split(","))
    ops = [AlterConfigOp(k, v, OpType.SET if v else OpType.DELETE) for k, v in configs.items()]
    await _change(admin, name, ops)
    print(f"Altered client metrics config for {name}.")
    return 0


async def _configs(admin: Admin, name: str) -> dict[str, str | None]:
    described = (await admin.describe_configs([_resource(name)]))[_resource(name)]
    if described.error is not None:
        raise described.error
    return {entry.name: entry.value for entry in described.entries.values()}


async def _delete(admin: Admin, name: str) -> int:
    old = await _configs(admin, name)
    await _change(admin, name, [AlterConfigOp(k, None, OpType.DELETE) for k in old])
    print(f"Deleted client metrics config for {name}.")
    return 0


async def _describe(admin: Admin, name: str | None) -> int:
    names = [name] if name is not None else await list_resources(admin)
    for entity in names:
        print(f"Client metrics configs for {entity} are:")
        for key, value in (await _configs(admin, entity)).items():
            print(f"  {key}={value}")
    return 0


async def _list(admin: Admin) -> int:
    print("\n".join(await list_resources(admin)))
    return 0


async def list_resources(admin: Admin) -> list[str]:
    """The client-metrics resources' names (ListClientMetricsResources)."""
    response = await admin.client.request(
        None,
        ApiKey.LIST_CONFIG_RESOURCES,
        lambda v: api.make(
            api.request_class(ApiKey.LIST_CONFIG_RESOURCES, v),
            resource_types=(int(ConfigResourceType.CLIENT_METRICS),),
        ),
    )
    if response.error_code != ErrorCode.none:
        raise KafkaError(
            response.error_code, f"ListClientMetricsResources: {response.error_code.name}"
        )
    return [str(r.resource_name) for r in response.config_resources]
