"""kplane loadtest: control-plane latency with and without a loaded data plane (KIP-291).

``cli`` parses the options, ``runner`` runs the scenarios against a broker it starts (or a
three-broker cluster on ZooKeeper, ``scenarios``), ``controller`` is the fake controller,
``leader_moves`` has a cluster's real controller move leaders, ``producers`` and
``wire_load`` load the data plane, ``metrics`` scrapes the brokers, ``results`` writes
Parquet.
"""
