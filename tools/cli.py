"""The ``kplane`` command: subcommands like Kafka's scripts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tools import certs, cluster, configs, scram, serve
from tools.loadtest import cli as loadtest_cli
from tools.report import pipeline as report


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="kplane", description="kplane: a Kafka-wire-compatible broker"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(sub)
    certs.add_parser(sub)
    scram.add_parser(sub)
    configs.add_parser(sub)
    loadtest_cli.add_parser(sub)
    report.add_parser(sub)
    cluster.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kplane`` script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
