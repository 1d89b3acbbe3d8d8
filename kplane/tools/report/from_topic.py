"""``kplane report --from-topic TOPIC --bootstrap-server HOST:PORT --out DIR``: the results
``kplane loadtest --to-topic`` published, read through the kplane Spark data source
(``kplane/spark/``) and analysed as a results directory is.

Records keyed ``requests`` and ``samples`` hold one row each as JSON (parsed by Spark's
``from_json`` into the columns of requests.parquet and samples.parquet); the last ``summary``
record is written to DIR/summary.json and shown in the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kplane.spark import FORMAT, register
from kplane.tools.report.pipeline import (
    REQUEST_COLUMNS,
    SAMPLE_COLUMNS,
    ReportResult,
    _jvm_output_to,
    analyse_frames,
    spark_session,
    write_report,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build_report_from_topic(
    bootstrap: str, topic: str, out_dir: Path, master: str = "local[*]"
) -> ReportResult:
    """Read ``topic`` from ``bootstrap`` with Spark and write the report into ``out_dir``."""
    from pyspark.sql import functions as F

    out_dir.mkdir(parents=True, exist_ok=True)
    with _jvm_output_to(out_dir / "spark.log"), spark_session(master) as spark:
        register(spark)
        records = (
            spark.read.format(FORMAT)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .select(
                F.col("key").cast("string").alias("kind"),
                F.col("value").cast("string").alias("json"),
                "partition",
                "offset",
            )
            .cache()
        )
        try:
            summaries = (
                records.filter(F.col("kind") == "summary")
                .orderBy("partition", "offset")
                .select("json")
                .collect()
            )
            if summaries:
                (out_dir / "summary.json").write_text(summaries[-1]["json"], encoding="utf-8")
            samples = _rows(records, "samples", SAMPLE_COLUMNS)
            analysis = analyse_frames(
                spark,
                _rows(records, "requests", REQUEST_COLUMNS),
                None if samples.isEmpty() else samples,
                f"topic {topic}",
            )
        finally:
            records.unpersist()
    return write_report(analysis, out_dir, out_dir, master)


def _rows(records: DataFrame, kind: str, columns: dict[str, str]) -> DataFrame:
    """The ``kind`` records' JSON as ``columns``."""
    from pyspark.sql import functions as F

    ddl = ", ".join(f"`{name}` {kind_}" for name, kind_ in columns.items())
    return (
        records.filter(F.col("kind") == kind)
        .select(F.from_json("json", ddl).alias("row"))
        .select(*(F.col(f"row.{name}").alias(name) for name in columns))
    )
