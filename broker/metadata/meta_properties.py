"""``meta.properties`` in the log directory: which broker and cluster the data belongs to."""

from __future__ import annotations

import os

from broker.config.errors import ConfigException
from broker.config.properties import load_properties

FILE_NAME = "meta.properties"


def check_meta_properties(log_dir: str, broker_id: int, cluster_id: str) -> None:
    """Write ``meta.properties`` on first start; later, refuse a log directory that belongs
    to another cluster or broker (Kafka's InconsistentClusterIdException / broker id check)."""
    path = os.path.join(log_dir, FILE_NAME)
    if os.path.exists(path):
        stored = load_properties(path)
        if stored.get("cluster.id") not in (None, cluster_id):
            raise ConfigException(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId "
                f"{stored['cluster.id']} in {path}. The broker is trying to join the wrong "
                "cluster. Configured zookeeper.connect may be wrong.",
                name="zookeeper.connect",
            )
        if stored.get("broker.id") not in (None, str(broker_id)):
            raise ConfigException(
                f"Configured broker.id {broker_id} doesn't match stored broker.id "
                f"{stored['broker.id']} in {path}",
                name="broker.id",
            )
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
    os.replace(tmp, path)
