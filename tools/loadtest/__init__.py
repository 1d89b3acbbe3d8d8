"""kplane loadtest: control-plane latency with and without a loaded data plane (KIP-291).

``cli`` parses the options, ``runner`` runs the scenarios against a broker it starts,
``controller`` is the fake controller, ``producers`` and ``wire_load`` load the data plane,
``metrics`` scrapes the broker, ``results`` writes Parquet.
"""
