"""``kplane report RESULTS_DIR [--out DIR] [--master URL]``: Spark analytics of a load test.

Reads what ``kplane loadtest`` writes into RESULTS_DIR:

* ``requests.parquet`` (a file or a directory of part files), one row per request:
  ``scenario`` (idle|shared|separated|cluster-shared|cluster-separated), ``plane``
  (control|data|propagation), ``api``, ``send_time`` (unix s), ``latency_ms`` (send to
  response; a cluster's controller requests as the receiving broker timed them) and
  ``error`` (null when it succeeded);
* ``samples.parquet`` (optional): broker metric samples ``scenario``, ``time``, ``metric``,
  ``value`` (a cluster's carry a ``broker`` label; queue charts show the largest over the
  brokers);
* ``summary.json`` (optional): shown as it is.

and writes report.md, report.html, latency.csv and four PNG charts. When the samples hold
metrics the load's clients pushed (KIP-714), a table shows them per scenario beside the
broker's own Produce TotalTimeMs. Percentiles are exact
(Spark's ``percentile``: linear interpolation, as numpy's default) over every request that
has a latency, failed ones included as in Kafka's TotalTimeMs. Times are seconds since each
scenario's first request or sample. Only aggregates are collected to the driver.

With ``--from-topic TOPIC --bootstrap-server HOST:PORT --out DIR`` the same rows come from
the records ``kplane loadtest --to-topic`` published, read through the kplane Spark data
source (``kplane/tools/report/from_topic.py``).

pyspark and matplotlib (the ``report`` extra) are imported only when a report is built.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import html
import json
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kplane.tools.report import charts as report_charts
from kplane.tools.report.charts import Curves, Points

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

LOOPBACK = "127.0.0.1"
SCENARIOS = ("idle", "shared", "separated", "cluster-shared", "cluster-separated")
HEADLINE_PAIRS = (
    ("shared", "separated"),
    ("separated", "idle"),
    ("cluster-shared", "cluster-separated"),
)
API_HEADLINES = ((("cluster-shared", "cluster-separated"), "LeaderAndIsr"),)
"""Pairs also compared on one controller API's p50 and p99."""
TABLE_QUANTILES = (0.5, 0.95, 0.99, 0.999)
CDF_QUANTILES = tuple(
    sorted({i / 180 for i in range(181)} | {0.99 + i / 1000 for i in range(1, 10)} | {0.9999})
)
QUEUE_METRIC_MARK = "QueueSize"
CLIENT_METRIC_PREFIX = "org_apache_kafka_"
"""The metrics clients pushed (KIP-714), as the broker exposes them."""
BROKER_PRODUCE_TIME = "broker Produce TotalTimeMs"
CLIENT_HEADER = ("scenario", "measured by", "metric", "samples", "mean", "max")
REQUEST_COLUMNS = {
    "scenario": "string",
    "plane": "string",
    "api": "string",
    "send_time": "double",
    "latency_ms": "double",
    "error": "string",
}
SAMPLE_COLUMNS = {"scenario": "string", "time": "double", "metric": "string", "value": "double"}
NAME_HEADER = ("scenario", "plane", "api")
NUMBER_HEADER = ("requests", "errors", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms")
CHART_TITLES = {
    "latency_cdf.png": "Latency CDF per plane and scenario",
    "latency_over_time.png": "Control-plane latency over time",
    "queue_size.png": "Request queue sizes",
    "throughput.png": "Throughput per second",
}

HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } th { background: #f3f3f3; }
img { max-width: 100%; } pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }
"""


class ReportError(Exception):
    """Unusable input; the CLI prints it on one line and exits 2."""


@dataclass(frozen=True)
class LatencyRow:
    """Latency statistics of one scenario x plane x api (milliseconds)."""

    scenario: str
    plane: str
    api: str
    count: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p99_9_ms: float | None
    max_ms: float | None


@dataclass(frozen=True)
class ClientMetricRow:
    """A pushed client metric over one scenario (every client's samples), or the broker's
    Produce TotalTimeMs beside it (``samples``: the requests, ``max`` None)."""

    scenario: str
    source: str  # "clients" or "broker"
    metric: str
    samples: int
    mean: float | None
    max: float | None


@dataclass(frozen=True)
class Analysis:
    """Everything the report shows; small enough to hold on the driver."""

    latency: list[LatencyRow]
    control_p50: dict[str, float | None]
    control_p99: dict[str, float | None]
    cdf: Curves
    control_over_time: Curves
    throughput: Curves
    queue: Curves
    spark_version: str
    client_metrics: list[ClientMetricRow] = dataclasses.field(default_factory=list)

    @property
    def scenarios(self) -> set[str]:
        return {row.scenario for row in self.latency}


@dataclass(frozen=True)
class ReportResult:
    """The files written and the headline numbers."""

    paths: list[Path]
    latency: list[LatencyRow]
    control_p50: dict[str, float | None]
    control_p99: dict[str, float | None]
    shared_vs_separated: float | None
    separated_vs_idle: float | None
    cluster_shared_vs_separated: float | None = None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``report`` subcommand."""
    parser = sub.add_parser(
        "report",
        help="analyse `kplane loadtest` results with Spark: latency table, charts, HTML",
    )
    _add_arguments(parser)
    parser.set_defaults(func=run)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results_dir", type=Path, nargs="?", help="directory written by kplane loadtest"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: RESULTS_DIR)"
    )
    parser.add_argument(
        "--from-topic",
        metavar="TOPIC",
        help="read the results from TOPIC (kplane loadtest --to-topic) through the kplane "
        "Spark data source instead of RESULTS_DIR; needs --bootstrap-server and --out",
    )
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="with --from-topic")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")


def run(args: argparse.Namespace) -> int:
    """Build the report and print the files written; 2 on unusable input."""
    out_dir = args.out if args.out is not None else args.results_dir
    try:
        if getattr(args, "from_topic", None):
            from kplane.tools.report.from_topic import build_report_from_topic

            if args.results_dir is not None or not args.bootstrap_server or out_dir is None:
                raise ReportError("--from-topic takes --bootstrap-server and --out, no RESULTS_DIR")
            result = build_report_from_topic(
                args.bootstrap_server, args.from_topic, out_dir, args.master
            )
        elif args.results_dir is None:
            raise ReportError("give RESULTS_DIR, or --from-topic")
        else:
            result = build_report(args.results_dir, out_dir, args.master)
    except ReportError as exc:
        print(f"kplane report: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        print(
            f"kplane report: {exc.name} is not installed; pip install 'kplane[report]'",
            file=sys.stderr,
        )
        return 1
    print(headline(result))
    print(f"Spark's own output: {out_dir / 'spark.log'}; files written:")
    for path in result.paths:
        print(path)
    return 0


def headline(result: ReportResult) -> str:
    """The numbers that matter, first: control-plane p50/p99 per scenario, then their ratios."""
    latencies = ", ".join(
        f"{name} {_ms_pair(result.control_p50.get(name), p99)} ms"
        for name, p99 in result.control_p99.items()
    )
    ratios = [
        f"{stat} " + ", ".join(f"{top}/{bottom} {ratio:.1f}x" for (top, bottom), ratio in pairs)
        for stat, pairs in (
            ("p99", _present(_ratios(result.control_p99))),
            ("p50", _present(_ratios(result.control_p50))),
        )
        if pairs
    ]
    line = f"control-plane p50/p99: {latencies}"
    return line + (f"\nratios: {'; '.join(ratios)}" if ratios else "")


def _ms_pair(p50: float | None, p99: float | None) -> str:
    return "/".join("n/a" if v is None else f"{v:.2f}" for v in (p50, p99))


def _present(
    ratios: dict[tuple[str, str], float | None],
) -> list[tuple[tuple[str, str], float]]:
    return [(pair, ratio) for pair, ratio in ratios.items() if ratio is not None]


@contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """Send what the process writes to its stderr file descriptor (the JVM's log4j start-up
    lines and warnings included) to ``path`` meanwhile; Python's own errors still raise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kplane.tools.report.pipeline RESULTS_DIR ...``."""
    parser = argparse.ArgumentParser(
        prog="kplane report", description="Spark analytics of kplane loadtest results"
    )
    _add_arguments(parser)
    return run(parser.parse_args(argv))


def build_report(results_dir: Path, out_dir: Path, master: str = "local[*]") -> ReportResult:
    """Analyse ``results_dir`` with Spark and write the report into ``out_dir``."""
    requests_path = _requests_path(results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _jvm_output_to(out_dir / "spark.log"), spark_session(master) as spark:
        analysis = analyse(spark, requests_path, results_dir / "samples.parquet")
    return write_report(analysis, results_dir, out_dir, master)


@contextmanager
def spark_session(master: str = "local[*]") -> Iterator[SparkSession]:
    """The active session if there is one (left running), else a new one bound to loopback
    and stopped on exit."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    # Python workers run this interpreter, where kplane (the kplane data source) is installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("kplane-report")
    for key, value in _spark_conf(master).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _spark_conf(master: str) -> dict[str, str]:
    conf = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
    }
    if master.startswith("local"):
        conf["spark.sql.shuffle.partitions"] = "4"
    return conf


def _requests_path(results_dir: Path) -> Path:
    """``requests.parquet`` of ``results_dir``; ReportError when there is nothing to read."""
    if not results_dir.is_dir():
        raise ReportError(f"results directory {results_dir} does not exist")
    if not any(results_dir.iterdir()):
        raise ReportError(f"results directory {results_dir} is empty")
    path = results_dir / "requests.parquet"
    if not _has_parquet(path):
        raise ReportError(f"{path} is missing or empty")
    return path


def _has_parquet(path: Path) -> bool:
    """A non-empty Parquet file, or a directory holding at least one."""
    if path.is_file():
        return path.stat().st_size > 0
    return path.is_dir() and any(p.stat().st_size > 0 for p in path.rglob("*.parquet"))


def analyse(spark: SparkSession, requests_path: Path, samples_path: Path) -> Analysis:
    """Run the Spark aggregations; samples are optional."""
    requests = _load(spark, requests_path, REQUEST_COLUMNS)
    samples = _load(spark, samples_path, SAMPLE_COLUMNS) if _has_parquet(samples_path) else None
    return analyse_frames(spark, requests, samples, str(requests_path))


def analyse_frames(
    spark: SparkSession, requests: DataFrame, samples: DataFrame | None, source: str
) -> Analysis:
    """The Spark aggregations of REQUEST_COLUMNS rows (and SAMPLE_COLUMNS ones) read from
    ``source``."""
    starts = _scenario_starts(requests, samples)
    timed = _relative(requests, "send_time", starts).cache()
    try:
        if timed.isEmpty():
            raise ReportError(f"{source} holds no requests")
        control_p50, control_p99 = control_latency(timed)
        return Analysis(
            latency=latency_table(timed),
            control_p50=control_p50,
            control_p99=control_p99,
            cdf=cdf_curves(timed),
            control_over_time=control_latency_over_time(timed),
            throughput=throughput_curves(timed),
            queue=queue_curves(_relative(samples, "time", starts)) if samples is not None else {},
            spark_version=spark.version,
            client_metrics=client_metric_table(samples) if samples is not None else [],
        )
    finally:
        timed.unpersist()


def _load(spark: SparkSession, path: Path, columns: dict[str, str]) -> DataFrame:
    """The Parquet file or directory with exactly ``columns``, cast to their types."""
    frame = spark.read.parquet(str(path))
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ReportError(f"{path} lacks the column(s) {', '.join(missing)}")
    from pyspark.sql import functions as F

    return frame.select(*(F.col(name).cast(kind).alias(name) for name, kind in columns.items()))


def _scenario_starts(requests: DataFrame, samples: DataFrame | None) -> DataFrame:
    """scenario → start: its earliest request or sample (unix seconds)."""
    from pyspark.sql import functions as F

    moments = requests.select("scenario", F.col("send_time").alias("at"))
    if samples is not None:
        moments = moments.unionByName(samples.select("scenario", F.col("time").alias("at")))
    return moments.groupBy("scenario").agg(F.min("at").alias("start"))


def _relative(frame: DataFrame, time_column: str, starts: DataFrame) -> DataFrame:
    """Adds ``t`` (seconds since the scenario's start) and its whole ``second``."""
    from pyspark.sql import functions as F

    return (
        frame.join(F.broadcast(starts), "scenario")
        .withColumn("t", F.col(time_column) - F.col("start"))
        .withColumn("second", F.floor("t").cast("int"))
    )


def latency_table(requests: DataFrame) -> list[LatencyRow]:
    """Count, errors and exact latency percentiles per scenario x plane x api."""
    from pyspark.sql import functions as F

    rows = (
        requests.groupBy("scenario", "plane", "api")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count("error").alias("errors"),
            F.percentile("latency_ms", list(TABLE_QUANTILES)).alias("q"),
            F.max("latency_ms").alias("max"),
        )
        .collect()
    )
    table = [_latency_row(r) for r in rows]
    return sorted(table, key=lambda row: _order(row.scenario, row.plane, row.api))


def _latency_row(r: Row) -> LatencyRow:
    p50, p95, p99, p99_9 = r["q"] or [None] * len(TABLE_QUANTILES)
    return LatencyRow(
        scenario=r["scenario"],
        plane=r["plane"],
        api=r["api"],
        count=r["n"],
        errors=r["errors"],
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        p99_9_ms=p99_9,
        max_ms=r["max"],
    )


def control_latency(
    requests: DataFrame,
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """scenario → exact p50, and scenario → exact p99, of all its control-plane requests."""
    from pyspark.sql import functions as F

    rows = (
        requests.filter(F.col("plane") == "control")
        .groupBy("scenario")
        .agg(F.percentile("latency_ms", [0.5, 0.99]).alias("q"))
        .collect()
    )
    ordered = sorted(rows, key=lambda r: _order(r["scenario"]))
    return (
        {r["scenario"]: (r["q"] or [None, None])[0] for r in ordered},
        {r["scenario"]: (r["q"] or [None, None])[1] for r in ordered},
    )


def cdf_curves(requests: DataFrame) -> Curves:
    """(scenario, plane) → (latency ms, fraction) at CDF_QUANTILES, computed in Spark."""
    from pyspark.sql import functions as F

    rows = (
        requests.groupBy("scenario", "plane")
        .agg(F.percentile("latency_ms", list(CDF_QUANTILES)).alias("q"))
        .collect()
    )
    items = [
        ((r["scenario"], r["plane"]), list(zip(r["q"], CDF_QUANTILES, strict=True)))
        for r in rows
        if r["q"]
    ]
    return dict(sorted(items, key=lambda item: _order(*item[0])))


def control_latency_over_time(requests: DataFrame) -> Curves:
    """(scenario, "p50" | "p99") → (second, control-plane latency ms) per second."""
    from pyspark.sql import functions as F

    rows = (
        requests.filter(F.col("plane") == "control")
        .groupBy("scenario", "second")
        .agg(
            F.percentile("latency_ms", 0.5).alias("p50"),
            F.percentile("latency_ms", 0.99).alias("p99"),
        )
        .unpivot(["scenario", "second"], ["p50", "p99"], "stat", "ms")
        .filter(F.col("ms").isNotNull())
        .collect()
    )
    return _series(rows, "stat", "ms")


def throughput_curves(requests: DataFrame) -> Curves:
    """(scenario, plane) → (second, requests sent in it), seconds without requests as 0."""
    from pyspark.sql import functions as F

    counts = requests.groupBy("scenario", "plane", "second").agg(F.count(F.lit(1)).alias("n"))
    last = requests.groupBy("scenario").agg(F.max("second").alias("last"))
    grid = (
        requests.select("scenario", "plane")
        .distinct()
        .join(last, "scenario")
        .select("scenario", "plane", F.explode(F.sequence(F.lit(0), "last")).alias("second"))
    )
    rows = grid.join(counts, ["scenario", "plane", "second"], "left").fillna(0, ["n"]).collect()
    return _series(rows, "plane", "n")


def queue_curves(samples: DataFrame) -> Curves:
    """(scenario, *QueueSize metric) → (second, largest sample in that second); a cluster's
    brokers (the metric's labels) together."""
    from pyspark.sql import functions as F

    rows = (
        samples.filter(F.col("metric").contains(QUEUE_METRIC_MARK) & F.col("value").isNotNull())
        .withColumn("metric", F.split("metric", "[{]").getItem(0))
        .groupBy("scenario", "metric", "second")
        .agg(F.max("value").alias("value"))
        .collect()
    )
    return _series(rows, "metric", "value")


def client_metric_table(samples: DataFrame) -> list[ClientMetricRow]:
    """Per scenario: each pushed client metric's samples, mean and max over every client,
    and the broker's mean Produce TotalTimeMs (from its cumulative ``_sum`` and ``_count``,
    per broker, over the scenario)."""
    from pyspark.sql import functions as F

    base = F.split("metric", "[{]").getItem(0)
    clients = (
        samples.filter(F.col("metric").startswith(CLIENT_METRIC_PREFIX))
        .groupBy("scenario", base.alias("name"))
        .agg(F.count("value").alias("n"), F.avg("value").alias("mean"), F.max("value").alias("max"))
        .collect()
    )
    if not clients:
        return []
    rows = [
        ClientMetricRow(r["scenario"], "clients", r["name"], int(r["n"]), r["mean"], r["max"])
        for r in clients
    ]
    grown = (
        samples.filter(
            F.col("metric").startswith("TotalTimeMs_") & F.col("metric").contains('"Produce"')
        )
        .groupBy("scenario", "metric")
        .agg((F.max("value") - F.min("value")).alias("grown"))
        .collect()
    )
    totals: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in grown:
        totals[r["scenario"]][0 if r["metric"].startswith("TotalTimeMs_sum") else 1] += r["grown"]
    for scenario, (total_ms, count) in totals.items():
        if count > 0:
            rows.append(
                ClientMetricRow(
                    scenario, "broker", BROKER_PRODUCE_TIME, int(count), total_ms / count, None
                )
            )
    return sorted(rows, key=lambda r: (_order(r.scenario), r.source, r.metric))


def _series(rows: Iterable[Row], key: str, value: str) -> Curves:
    """Curves keyed (scenario, row[key]) of (second, row[value]), in report order."""
    points: defaultdict[tuple[str, str], Points] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["second"]):
        points[(r["scenario"], r[key])].append((float(r["second"]), float(r[value])))
    return dict(sorted(points.items(), key=lambda item: _order(*item[0])))


def _order(scenario: str, *rest: str) -> tuple[Any, ...]:
    """Sort key: the known scenarios first, in their run order, then by name."""
    rank = SCENARIOS.index(scenario) if scenario in SCENARIOS else len(SCENARIOS)
    return (rank, scenario, *rest)


def _ratios(latency: dict[str, float | None]) -> dict[tuple[str, str], float | None]:
    """(a, b) → a's control-plane latency ÷ b's, for HEADLINE_PAIRS; None if one is missing."""
    ratios: dict[tuple[str, str], float | None] = {}
    for top, bottom in HEADLINE_PAIRS:
        numerator, denominator = latency.get(top), latency.get(bottom)
        ratios[top, bottom] = (
            None if numerator is None or not denominator else numerator / denominator
        )
    return ratios


def write_report(analysis: Analysis, results_dir: Path, out_dir: Path, master: str) -> ReportResult:
    """Write the charts, latency.csv, report.md and report.html into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    charts = [
        report_charts.latency_cdf(out_dir / "latency_cdf.png", analysis.cdf),
        report_charts.latency_over_time(
            out_dir / "latency_over_time.png", analysis.control_over_time
        ),
        report_charts.queue_size(out_dir / "queue_size.png", analysis.queue),
        report_charts.throughput(out_dir / "throughput.png", analysis.throughput),
    ]
    table = _write_csv(out_dir / "latency.csv", analysis.latency)
    document = _document(analysis, results_dir, master)
    markdown = out_dir / "report.md"
    markdown.write_text(render_markdown(document), encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(render_html(document), encoding="utf-8")
    ratios = _ratios(analysis.control_p99)
    return ReportResult(
        paths=[markdown, page, table, *charts],
        latency=analysis.latency,
        control_p50=analysis.control_p50,
        control_p99=analysis.control_p99,
        shared_vs_separated=ratios["shared", "separated"],
        separated_vs_idle=ratios["separated", "idle"],
        cluster_shared_vs_separated=ratios["cluster-shared", "cluster-separated"],
    )


def _write_csv(path: Path, rows: list[LatencyRow]) -> Path:
    """The latency table at full precision; empty cells for missing values."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(field.name for field in dataclasses.fields(LatencyRow))
        writer.writerows(dataclasses.astuple(row) for row in rows)
    return path


@dataclass(frozen=True)
class Document:
    """The report's content, rendered as Markdown and as HTML."""

    title: str
    facts: list[str]
    headlines: list[tuple[str, str, str]]  # label, ratio, detail
    table: list[list[str]]
    charts: dict[str, str]  # file name → title
    summary: str | None
    client_table: list[list[str]] = dataclasses.field(default_factory=list)


def _document(analysis: Analysis, results_dir: Path, master: str) -> Document:
    total = sum(row.count for row in analysis.latency)
    scenarios = ", ".join(dict.fromkeys(row.scenario for row in analysis.latency))
    facts = [
        f"Results: {results_dir.resolve()}",
        f"{total} requests; scenarios: {scenarios}",
        f"Spark {analysis.spark_version} ({master}); exact percentiles, failed requests included",
    ]
    return Document(
        title="kplane control-plane report (KIP-291)",
        facts=facts,
        headlines=_headlines(analysis.control_p99, analysis.scenarios)
        + _api_headlines(analysis.latency),
        table=[_table_cells(row) for row in analysis.latency],
        charts=CHART_TITLES,
        summary=_read_summary(results_dir / "summary.json"),
        client_table=[
            [r.scenario, r.source, r.metric, str(r.samples), _number(r.mean), _number(r.max)]
            for r in analysis.client_metrics
        ],
    )


def _headlines(p99: dict[str, float | None], present: set[str]) -> list[tuple[str, str, str]]:
    """(label, ratio, detail) of each HEADLINE_PAIRS control-plane p99 ratio with at least
    one of its scenarios in the results."""
    lines = []
    for (top, bottom), ratio in _ratios(p99).items():
        if top not in present and bottom not in present:
            continue
        shown = "n/a" if ratio is None else f"{ratio:.2f}x"
        detail = f"{top} {_ms(p99.get(top))}, {bottom} {_ms(p99.get(bottom))}"
        lines.append((f"Control-plane p99, {top} ÷ {bottom}", shown, detail))
    return lines


def _api_headlines(latency: list[LatencyRow]) -> list[tuple[str, str, str]]:
    """(label, ratio, detail) of each API_HEADLINES p50 and p99 ratio whose scenarios both
    have control-plane rows of that API."""
    rows = {(r.scenario, r.api): r for r in latency if r.plane == "control"}
    lines = []
    for (top, bottom), api_name in API_HEADLINES:
        a, b = rows.get((top, api_name)), rows.get((bottom, api_name))
        if a is None or b is None:
            continue
        for stat in ("p50", "p99"):
            x, y = getattr(a, f"{stat}_ms"), getattr(b, f"{stat}_ms")
            ratio = "n/a" if x is None or not y else f"{x / y:.2f}x"
            lines.append(
                (
                    f"{api_name} {stat}, {top} ÷ {bottom}",
                    ratio,
                    f"{top} {_ms(x)}, {bottom} {_ms(y)}",
                )
            )
    return lines


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{_number(value)} ms"


def _number(value: float | None) -> str:
    """About three significant figures, never in exponent notation; "n/a" for None."""
    if value is None:
        return "n/a"
    decimals = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3
    return f"{value:.{decimals}f}"


def _table_cells(row: LatencyRow) -> list[str]:
    latencies = (row.p50_ms, row.p95_ms, row.p99_ms, row.p99_9_ms, row.max_ms)
    return [
        row.scenario,
        row.plane,
        row.api,
        str(row.count),
        str(row.errors),
        *(_number(v) for v in latencies),
    ]


def _read_summary(path: Path) -> str | None:
    """summary.json pretty-printed (or as it is when it is not JSON); None when absent."""
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True)
    except json.JSONDecodeError:
        return text


def render_markdown(doc: Document) -> str:
    """The report as Markdown; charts are linked and shown by relative path."""
    lines = [f"# {doc.title}", "", *(f"- {fact}" for fact in doc.facts), "", "## Headline", ""]
    lines += [f"- {label}: **{ratio}** ({detail})" for label, ratio, detail in doc.headlines]
    lines += ["", "## Latency per scenario, plane and API", ""]
    align = ["---"] * len(NAME_HEADER) + ["---:"] * len(NUMBER_HEADER)
    lines += [_md_row(NAME_HEADER + NUMBER_HEADER), _md_row(align)]
    lines += [_md_row(cells) for cells in doc.table]
    if doc.client_table:
        lines += ["", f"## {CLIENT_TITLE}", ""]
        lines += [_md_row(CLIENT_HEADER), _md_row(["---"] * 3 + ["---:"] * 3)]
        lines += [_md_row(cells) for cells in doc.client_table]
    lines += ["", "## Charts", ""]
    for name, title in doc.charts.items():
        lines += [f"### [{title}]({name})", "", f"![{title}]({name})", ""]
    if doc.summary is not None:
        lines += ["## Load test summary (summary.json)", "", "```json", doc.summary, "```", ""]
    return "\n".join(lines)


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def render_html(doc: Document) -> str:
    """The report as one self-contained HTML page; the PNGs are referenced relatively."""
    e = html.escape
    head = "".join(f"<th>{e(cell)}</th>" for cell in NAME_HEADER + NUMBER_HEADER)
    body_rows = "".join(_html_row(cells) for cells in doc.table)
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(doc.title)}'
        f"</title><style>{HTML_STYLE}</style></head><body>",
        f"<h1>{e(doc.title)}</h1><ul>",
        *(f"<li>{e(fact)}</li>" for fact in doc.facts),
        "</ul><h2>Headline</h2><ul>",
        *(
            f"<li>{e(label)}: <strong>{e(ratio)}</strong> ({e(detail)})</li>"
            for label, ratio, detail in doc.headlines
        ),
        "</ul><h2>Latency per scenario, plane and API</h2>",
        f"<table><thead><tr>{head}</tr></thead><tbody>\n{body_rows}</tbody></table>",
        _html_client_table(doc.client_table),
        "<h2>Charts</h2>",
        *(
            f'<h3><a href="{e(name)}">{e(title)}</a></h3><img src="{e(name)}" alt="{e(title)}">'
            for name, title in doc.charts.items()
        ),
    ]
    if doc.summary is not None:
        parts += ["<h2>Load test summary (summary.json)</h2>", f"<pre>{e(doc.summary)}</pre>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)


CLIENT_TITLE = "What the clients measured (KIP-714), beside the broker"


def _html_client_table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in CLIENT_HEADER)
    body = "".join(_html_row(cells, names=3) for cells in rows)
    return (
        f"<h2>{html.escape(CLIENT_TITLE)}</h2>"
        f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"
    )


def _html_row(cells: Sequence[str], names: int = len(NAME_HEADER)) -> str:
    """A table row; the number cells (after the first ``names``) are right-aligned."""
    tds = (
        f"<td>{html.escape(c)}</td>" if i < names else f'<td class="n">{html.escape(c)}</td>'
        for i, c in enumerate(cells)
    )
    return f"<tr>{''.join(tds)}</tr>\n"


if __name__ == "__main__":
    sys.exit(main())
