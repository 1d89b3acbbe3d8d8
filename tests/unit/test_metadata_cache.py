"""MetadataCache.update: topics upserted and removed, the id index kept in step."""

from __future__ import annotations

import uuid

from kplane.broker.metadata.cache import MetadataCache, TopicInfo


def topic(name: str) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), {})


def test_ids_follow_upserts_recreations_and_removals() -> None:
    cache = MetadataCache("cluster", 0)
    a, b = topic("a"), topic("b")
    cache.update(topics=iter([a, b]))
    recreated = topic("a")
    cache.update(topics=[recreated], removed_topics=["b"])

    assert cache.snapshot.topics == {"a": recreated}
    assert cache.snapshot.topic_ids == {recreated.topic_id: "a"}
    assert cache.topic_name(a.topic_id) is None
