"""Kafka topics as Spark DataFrames through Spark's Python Data Source API: the ``kplane``
data source takes the options of Spark's Kafka source and sink and gives their schema,
with no JVM connector (``spark-sql-kafka``) to fetch; kplane's asyncio client does the
Kafka side, on the driver (planning) and on the executors (reading, producing).

    from kplane.spark import register
    register(spark)
    spark.read.format("kplane").option("kafka.bootstrap.servers", "localhost:9092") \\
        .option("subscribe", "events").load()

Needs pyspark 4.2+ and pyarrow (the ``report`` extra); Spark's Python workers must run a
Python with kplane installed (``PYSPARK_PYTHON``, or ``spark.pyspark.python``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "kplane"


def register(spark: SparkSession) -> None:
    """Register the ``kplane`` data source with ``spark`` (batch and streaming, read and
    write)."""
    from kplane.spark.source import KplaneDataSource

    spark.dataSource.register(KplaneDataSource)
