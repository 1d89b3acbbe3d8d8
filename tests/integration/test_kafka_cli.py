"""Kafka's command-line set in kplane (topics, get-offsets, delete-records, console producer
and consumer, consumer-groups), run as a user runs them, checked with real clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer
from kafka.errors import KafkaError as KafkaPythonError

from kplane.testing.plugin import RunningBroker
from tests.repo import REPO_ROOT

from .helpers import command_config, secured_broker_overrides, with_inter_broker_sasl


def kplane(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", *args],
        input=stdin, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False,
    )


def ok(*args: str, stdin: str = "") -> str:
    done = kplane(*args, stdin=stdin)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_topics_create_list_describe_alter_delete(broker: RunningBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    out = ok("topics", *b, "--create", "--topic", "orders", "--partitions", "2",
             "--config", "retention.ms=60000")
    assert out == "Created topic orders.\n"
    again = kplane("topics", *b, "--create", "--topic", "orders")
    assert again.returncode == 1
    assert again.stderr == "Error while executing topic command : Topic 'orders' already exists.\n"
    ok("topics", *b, "--create", "--topic", "orders", "--if-not-exists")
    assert "orders" in ok("topics", *b, "--list").split()

    lines = ok("topics", *b, "--describe", "--topic", "orders").splitlines()
    head = lines[0].split("\t")
    assert head[0] == "Topic: orders" and head[2:] == [
        "PartitionCount: 2", "ReplicationFactor: 1", "Configs: retention.ms=60000"
    ]
    assert lines[1:] == [
        f"\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in (0, 1)
    ]
    ok("topics", *b, "--alter", "--topic", "orders", "--partitions", "3")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert len(admin.list_topics("orders", timeout=10).topics["orders"].partitions) == 3

    ok("topics", *b, "--delete", "--topic", "orders")
    gone = kplane("topics", *b, "--describe", "--topic", "orders")
    assert gone.returncode == 1
    assert gone.stderr.strip().endswith("Topic 'orders' does not exist as expected")


def test_offsets_and_delete_records(broker: RunningBroker, tmp_path: Path) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    broker.create_topic("events", partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(5):
        producer.produce("events", b"v%d" % i, partition=0)
    assert producer.flush(10) == 0
    assert ok("get-offsets", *b, "--topic", "events").splitlines() == ["events:0:5", "events:1:0"]

    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps(
        {"partitions": [{"topic": "events", "partition": 0, "offset": 3}], "version": 1}
    ))
    out = ok("delete-records", *b, "--offset-json-file", str(offsets))
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: events-0\tlow_watermark: 3",
    ]
    assert ok("get-offsets", *b, "--topic", "ev.*", "--time", "-2", "--partitions", "0") == (
        "events:0:3\n"
    )
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "w"})
    low, high = consumer.get_watermark_offsets(TopicPartition("events", 0), timeout=10)
    consumer.close()
    assert (low, high) == (3, 5)


def test_console_producer_and_consumer_round_trip(broker: RunningBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    broker.create_topic("lines")
    ok("console-producer", *b, "--topic", "lines", "--property", "parse.key=true",
       "--property", "key.separator=:", stdin="k1:hello\nk2:world\n")
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": "check",
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe(["lines"])
    got = []
    while len(got) < 2:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        got.append((message.key(), message.value()))
    consumer.close()
    assert got == [(b"k1", b"hello"), (b"k2", b"world")]

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("lines", key=b"k3", value=b"third")
    assert producer.flush(10) == 0
    done = kplane("console-consumer", *b, "--topic", "lines", "--from-beginning",
                  "--max-messages", "3", "--property", "print.key=true",
                  "--property", "print.offset=true")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Offset:0\tk1\thello", "Offset:1\tk2\tworld", "Offset:2\tk3\tthird"
    ]
    assert "Processed a total of 3 messages" in done.stderr

    bad = kplane("console-producer", *b, "--topic", "lines", "--property", "parse.key=true",
                 stdin="no separator here\n")
    assert bad.returncode == 1
    assert "No key separator found on line number 1" in bad.stderr


def test_console_consumer_read_committed_hides_aborted_records(broker: RunningBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    broker.create_topic("txn")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "t1"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("txn", b"aborted")
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce("txn", b"committed")
    producer.commit_transaction(10)
    out = ok("console-consumer", *b, "--topic", "txn", "--from-beginning", "--timeout-ms",
             "2000", "--isolation-level", "read_committed")
    assert out == "committed\n"


def test_consumer_groups_describe_reset_delete(broker: RunningBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    broker.create_topic("work")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(10):
        producer.produce("work", b"%d" % i)
    assert producer.flush(10) == 0
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": "workers",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe(["work"])
    read = 0
    while read < 4:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        read += 1
    consumer.commit(asynchronous=False)
    assert "workers" in ok("consumer-groups", *b, "--list").split()
    active = ok("consumer-groups", *b, "--describe", "--group", "workers").splitlines()
    assert active[1].split()[:6] == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"
    ]
    assert active[2].split()[:6] == ["workers", "work", "0", "4", "10", "6"]
    refused = kplane("consumer-groups", *b, "--reset-offsets", "--group", "workers",
                     "--topic", "work", "--to-earliest", "--execute")
    assert refused.returncode == 1 and "can only be reset if the group" in refused.stderr
    consumer.close()

    dry = ok("consumer-groups", *b, "--reset-offsets", "--group", "workers", "--topic",
             "work", "--shift-by", "-2", "--dry-run").splitlines()
    assert dry[2].split() == ["workers", "work", "0", "2"]
    ok("consumer-groups", *b, "--reset-offsets", "--group", "workers", "--topic", "work:0",
       "--to-offset", "7", "--execute")
    again = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "workers"})
    (committed,) = again.committed([TopicPartition("work", 0)], timeout=10)
    again.close()
    assert committed.offset == 7

    out = ok("consumer-groups", *b, "--delete", "--group", "workers")
    assert out == "Deletion of requested consumer groups ('workers') was successful.\n"
    missing = kplane("consumer-groups", *b, "--describe", "--group", "workers")
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr


@pytest.fixture
def sasl_broker(broker_factory) -> RunningBroker:  # type: ignore[no-untyped-def]
    return broker_factory(with_inter_broker_sasl({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";'
        ),
    }))


def test_the_tools_take_a_command_config(sasl_broker: RunningBroker, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=alice\nsasl.password=alice-secret\n"
    )
    b = ("--bootstrap-server", sasl_broker.bootstrap("SASL_PLAINTEXT"),
         "--command-config", str(config))
    ok("topics", *b, "--create", "--topic", "secure")
    ok("console-producer", *b, "--topic", "secure", stdin="one\ntwo\n")
    out = ok("console-consumer", *b, "--topic", "secure", "--from-beginning",
             "--max-messages", "2")
    assert out == "one\ntwo\n"
    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    denied = kplane("topics", *b, "--list")
    assert denied.returncode == 1
    assert len(denied.stderr.strip().splitlines()) == 1
    assert "Traceback" not in denied.stderr


def test_acls_add_list_remove_with_their_effect(broker_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(secured_broker_overrides())
    bootstrap = broker.bootstrap("SASL_PLAINTEXT")
    config = command_config(tmp_path / "admin.properties", "admin")
    b = ("--bootstrap-server", bootstrap, "--command-config", str(config))
    ok("topics", *b, "--create", "--topic", "orders")
    def alice_produces() -> bool:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username="alice",
            sasl_plain_password="alice-secret", max_block_ms=5000,
        )
        try:
            producer.send("orders", b"x").get(timeout=10)
            return True
        except KafkaPythonError:
            return False
        finally:
            producer.close()

    assert not alice_produces()
    out = ok("acls", *b, "--add", "--allow-principal", "User:alice", "--producer",
             "--topic", "orders")
    assert out.startswith(
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=WRITE, "
        "permissionType=ALLOW) \n"
    )
    assert alice_produces()
    listed = ok("acls", *b, "--list", "--topic", "orders")
    assert "operation=CREATE" in listed and "operation=DESCRIBE" in listed
    ok("acls", *b, "--remove", "--allow-principal", "User:alice", "--topic", "orders", "--force")
    assert ok("acls", *b, "--list", "--topic", "orders") == ""
    refused = kplane("acls", *b, "--remove", "--allow-principal", "User:alice",
                     "--topic", "orders")
    assert refused.returncode == 1 and "--force" in refused.stderr


def test_configs_entity_type_users_manages_scram_credentials(  # type: ignore[no-untyped-def]
    broker_factory, tmp_path: Path
) -> None:
    broker = broker_factory(with_inter_broker_sasl({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-secret";'
        ),
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }))
    bootstrap = broker.bootstrap("SASL_PLAINTEXT")
    config = command_config(tmp_path / "admin.properties", "admin")
    b = ("--bootstrap-server", bootstrap, "--command-config", str(config))
    out = ok("configs", *b, "--alter", "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
             "--entity-type", "users", "--entity-name", "alice")
    assert out == "Completed updating config for user alice.\n"
    assert ok("configs", *b, "--describe", "--entity-type", "users", "--entity-name",
              "alice") == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192\n"
    )
    alice = AdminClient({
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
        "sasl.password": "alice-secret",
    })
    assert list(alice.list_topics(timeout=10).brokers) == [0]
    ok("configs", *b, "--alter", "--delete-config", "SCRAM-SHA-256", "--user", "alice")
    assert ok("configs", *b, "--describe", "--user", "alice") == ""
    # a user's client quota beside its (now deleted) credentials: the same node, kept apart
    ok("configs", *b, "--alter", "--add-config", "producer_byte_rate=1024", "--user", "alice")
    assert "producer_byte_rate=1024" in ok("configs", *b, "--describe", "--user", "alice")
