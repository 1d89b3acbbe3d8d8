"""``kplane loadtest --to-topic``: the records it publishes for ``kplane report --from-topic``
(the Spark data source reads them back in tests/integration/test_spark_source.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from kplane.tools.loadtest import runner as loadtest
from kplane.tools.loadtest.cli import add_arguments
from kplane.tools.loadtest.controller import ControlResult
from kplane.tools.loadtest.metrics import Sample
from kplane.tools.loadtest.publish import result_records
from kplane.tools.loadtest.results import ScenarioRun


def test_one_record_per_row_then_the_summary() -> None:
    run = ScenarioRun(
        "shared",
        None,  # type: ignore[arg-type]  # the rows never read the target
        {},
        1.0,
        control=[ControlResult("LeaderAndIsr", 10.5, 3.25, None)],
        samples=[Sample(11.0, "RequestQueueSize", 4.0)],
    )
    records = list(result_records([run], {"duration_s": 1}))
    assert [key for key, _ in records] == [b"requests", b"samples", b"summary"]
    assert json.loads(records[0][1]) == {
        "scenario": "shared",
        "plane": "control",
        "api": "LeaderAndIsr",
        "send_time": 10.5,
        "latency_ms": 3.25,
        "error": None,
    }
    assert json.loads(records[1][1]) == {
        "scenario": "shared",
        "time": 11.0,
        "metric": "RequestQueueSize",
        "value": 4.0,
    }
    assert json.loads(records[2][1]) == {"duration_s": 1}


def test_to_topic_goes_with_a_bootstrap_server() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ValueError, match="go together"):
        loadtest._check(parser.parse_args(["--to-topic", "results"]))
