"""``kplane certs create --dir DIR --hosts H1,H2 [--days N] [--password PASS]``: a test PKI.

Replaces the keytool/openssl dance for trying kplane over TLS: a CA, a broker certificate
(PEM and PKCS12) and a client certificate, plus truststores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kplane.common.certs import DEFAULT_PASSWORD, PkiFiles, create_test_pki


def add_parser(sub: Any) -> None:
    """Register the ``certs`` subcommand."""
    parser = sub.add_parser("certs", help="create test TLS certificates (instead of keytool)")
    actions = parser.add_subparsers(dest="certs_action", required=True)
    create = actions.add_parser(
        "create", help="write a test CA, a broker and a client certificate into a directory"
    )
    create.add_argument("--dir", required=True, type=Path, help="output directory")
    create.add_argument(
        "--hosts",
        default="localhost,127.0.0.1",
        help="comma-separated broker host names and IP addresses for the subjectAltName "
        "(default: localhost,127.0.0.1)",
    )
    create.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    create.add_argument(
        "--password",
        default=DEFAULT_PASSWORD,
        help=f"password of the broker key and the PKCS12 stores (default {DEFAULT_PASSWORD})",
    )
    create.set_defaults(func=run_create)


def run_create(args: argparse.Namespace) -> int:
    """Create the PKI and print the files and example settings; 0 on success."""
    hosts = [h.strip() for h in str(args.hosts).split(",") if h.strip()]
    if not hosts:
        print("kplane certs create: --hosts must name at least one host", file=sys.stderr)
        return 2
    try:
        files = create_test_pki(args.dir, hosts, password=args.password, days=args.days)
    except (ValueError, OSError) as exc:
        print(f"kplane certs create: {exc}", file=sys.stderr)
        return 1
    print(describe(files, hosts))
    return 0


def describe(files: PkiFiles, hosts: list[str]) -> str:
    """The report printed after creation: files written and example configuration."""
    d = files.directory.resolve()
    lines = [f"Wrote a test PKI for {', '.join(hosts)} (password: {files.password}):"]
    lines += [f"  {p.resolve()}" for p in files.paths()]
    lines += [
        "",
        "Broker (server.properties), PKCS12:",
        "  listeners=SSL://localhost:9093",
        "  ssl.keystore.type=PKCS12",
        f"  ssl.keystore.location={d / files.broker_p12.name}",
        f"  ssl.keystore.password={files.password}",
        "  ssl.truststore.type=PKCS12",
        f"  ssl.truststore.location={d / files.truststore_p12.name}",
        f"  ssl.truststore.password={files.password}",
        "  # ssl.client.auth=required  (mutual TLS with client.pem)",
        "",
        "Client (confluent-kafka / librdkafka):",
        "  security.protocol=SSL",
        f"  ssl.ca.location={d / files.ca_cert.name}",
        f"  ssl.certificate.location={d / files.client_cert.name}",
        f"  ssl.key.location={d / files.client_key.name}",
        "",
        "Java clients: ssl.truststore.type=PKCS12, "
        f"ssl.truststore.location={d / files.truststore_p12.name}, "
        f"ssl.keystore.location={d / files.client_p12.name} (password {files.password})",
    ]
    return "\n".join(lines)
