"""The ``kplane`` command: subcommands like Kafka's scripts.

Each subcommand lives in its own module with an ``add_parser(sub)`` function; only the
module of the subcommand being run is imported, so ``kplane --help`` and a command's own
``--help`` do not pay for the broker, the protocol schemas or Spark.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from kplane.tools.interrupts import interrupts_deferred

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "start a broker (like kafka-server-start)"),
    "certs": ("certs", "create test TLS certificates (instead of keytool)"),
    "scram": ("scram", "manage SCRAM-SHA-256/512 users through a broker"),
    "configs": ("configs", "describe and alter configs (kafka-configs.sh)"),
    "loadtest": ("loadtest.cli", "measure control-plane latency, separated vs shared"),
    "report": ("report.pipeline", "analyse `kplane loadtest` results with Spark"),
    "cluster": ("cluster", "start or stop a local ZooKeeper-backed cluster"),
    "topics": ("topics", "create, list, describe, alter, delete topics (kafka-topics)"),
    "get-offsets": ("get_offsets", "offsets of partitions (kafka-get-offsets)"),
    "delete-records": ("delete_records",
                       "delete records before offsets (kafka-delete-records)"),
    "console-producer": ("console_producer", "records from stdin (kafka-console-producer)"),
    "console-consumer": ("console_consumer", "records to stdout (kafka-console-consumer)"),
    "consumer-groups": ("consumer_groups", "list, describe, reset, delete consumer groups"),
    "share-groups": ("share_groups", "list, describe, reset, delete share groups (KIP-932)"),
    "acls": ("acls", "add, remove, list ACLs (kafka-acls)"),
    "log-dirs": ("log_dirs", "describe the log directories of brokers (kafka-log-dirs)"),
    "delegation-tokens": ("delegation_tokens",
                          "create, renew, expire, describe delegation tokens"),
    "client-metrics": ("client_metrics",
                       "client metrics subscriptions, KIP-714 (kafka-client-metrics)"),
    "doctor": ("doctor", "explain why a client cannot reach the brokers"),
    "faults": ("faults", "inject faults into a broker (kplane.faults.enable)"),
}
"""Subcommand name -> (its module under ``kplane.tools``, with ``add_parser``; one-line help
for ``kplane --help``)."""


def _wanted_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line, if it is one of ours."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser: the full parser of the subcommand ``argv`` names, a one-line
    entry for every other one."""
    parser = argparse.ArgumentParser(
        prog="kplane", description="kplane: a Kafka-wire-compatible broker"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = _wanted_command(argv)
    for name, (module, help_text) in COMMANDS.items():
        if name == wanted:
            importlib.import_module(f"kplane.tools.{module}").add_parser(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kplane`` script."""
    if argv is None:
        # kio imports hypothesis when it is installed (a dev dependency), only to register
        # test strategies: a command has no use for it, and it costs a third of start-up.
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        gc.disable()  # importing the command's modules allocates much and frees little
        try:
            with interrupts_deferred():
                parser = build_parser(args_list)
        finally:
            gc.enable()
        args = parser.parse_args(args_list)
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C before a command installed its own handling: quiet
        return 130


if __name__ == "__main__":
    sys.exit(main())
