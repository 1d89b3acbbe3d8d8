"""``kplane consumer-groups --delete-offsets`` run as a user runs it, its effect checked
with confluent-kafka (the rest of the tool is covered in test_kafka_cli.py)."""

from __future__ import annotations

from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

from kplane.testing.plugin import RunningBroker

from .test_kafka_cli import kplane, ok


def test_delete_offsets_of_an_inactive_group_and_refused_while_subscribed(
    broker: RunningBroker,
) -> None:
    b = ("--bootstrap-server", broker.bootstrap_servers)
    broker.create_topic("work", partitions=2)
    settings = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "workers"}
    consumer = Consumer({**settings, "enable.auto.commit": False})
    consumer.subscribe(["work"])
    while not consumer.assignment():
        consumer.poll(0.2)
    consumer.commit(
        offsets=[TopicPartition("work", 0, 3), TopicPartition("work", 1, 5)], asynchronous=False
    )
    refused = kplane("consumer-groups", *b, "--delete-offsets", "--group", "workers",
                     "--topic", "work:0")
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error: Encounter some partition level error, see the follow-up details:\n"
    )
    assert refused.stdout.split()[3:] == ["work", "0", "Error:", "group_subscribed_to_topic"]
    consumer.close()

    out = ok("consumer-groups", *b, "--delete-offsets", "--group", "workers", "--topic", "work:0")
    assert out.splitlines()[0] == (
        "Request succeed for deleting offsets with topic work:0 group workers"
    )
    assert out.split()[-3:] == ["work", "0", "Successful"]
    check = Consumer(settings)
    committed = check.committed([TopicPartition("work", 0), TopicPartition("work", 1)], timeout=10)
    check.close()
    assert [tp.offset for tp in committed] == [OFFSET_INVALID, 5]

    unknown = kplane("consumer-groups", *b, "--delete-offsets", "--group", "nobody",
                     "--topic", "work")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert unknown.stderr.startswith("Error: ")


def test_delete_offsets_needs_a_topic(broker: RunningBroker) -> None:
    done = kplane("consumer-groups", "--bootstrap-server", broker.bootstrap_servers,
                  "--delete-offsets", "--group", "workers")
    assert done.returncode == 1
    assert done.stderr == "kplane consumer-groups: --delete-offsets needs --topic\n"
