"""The short summary ``kplane loadtest`` prints: what ran, where, the control-plane latency
per scenario and the ratios that show KIP-291's point (``--json`` prints everything)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HEADER = ("scenario", "control p50 ms", "p99 ms", "max ms", "requests", "errors", "data msg/s")
CLIENT_LATENCY_AVG = "org_apache_kafka_producer_request_latency_avg"
CLIENT_LATENCY_MAX = "org_apache_kafka_producer_request_latency_max"
"""librdkafka's pushed Produce request latency (KIP-714), as the broker exposes it."""


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _rows(scenarios: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [HEADER]
    for name, scenario in scenarios.items():
        control = scenario["control"]
        latency = control["latency_ms"] or {}
        data = scenario.get("data") or {}
        rows.append(
            (
                name,
                _ms(latency.get("p50")),
                _ms(latency.get("p99")),
                _ms(latency.get("max")),
                str(control["requests"]),
                str(control["errors"]),
                f"{data.get('messages_per_s', 0):,.0f}" if data else "-",
            )
        )
    return rows


def _ratio_label(key: str) -> str:
    """``shared_control_p99/separated_control_p99`` → ``shared/separated control p99``."""
    top, bottom = (part.split("_", 1) for part in key.split("/"))
    return f"{top[0]}/{bottom[0]} {top[1].replace('_', ' ')}"


def _client_line(name: str, scenario: Mapping[str, Any]) -> str | None:
    """The Producers' pushed request latency beside the broker's Produce TotalTimeMs."""
    client = scenario.get("client_metrics") or {}
    avg = client.get(CLIENT_LATENCY_AVG)
    if avg is None:
        return None
    peak = client.get(CLIENT_LATENCY_MAX, {}).get("max")
    broker = {
        k: v for k, v in (scenario.get("total_time_ms_mean") or {}).items() if "Produce/" in k
    }
    broker_ms = _ms(sum(broker.values()) / len(broker)) if broker else "-"
    return (
        f"  {name}: client request latency avg {_ms(avg['mean'])} ms, max {_ms(peak)} ms; "
        f"broker Produce TotalTimeMs mean {broker_ms} ms"
    )


def summary_table(summary: Mapping[str, Any]) -> str:
    """The lines printed at the end of a run."""
    options = summary.get("options", {})
    scenarios = summary["scenarios"]
    load = options.get("load_client")
    lines = [
        f"kplane loadtest: {len(scenarios)} scenario(s) of {options.get('duration')} s, "
        f"{load} load over {options.get('producers')} connections",
        f"placement: {options.get('placement', 'not recorded')}",
        "",
    ]
    rows = _rows(scenarios)
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    for row in rows:
        cells = [
            row[0].ljust(widths[0]),
            *(v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)),
        ]
        lines.append("  ".join(cells))
    ratios = summary.get("ratios", {})
    if ratios:
        lines += ["", *(f"{_ratio_label(key)}: {value:.1f}x" for key, value in ratios.items())]
    client_lines = [line for s in scenarios.items() if (line := _client_line(*s))]
    if client_lines:
        lines += ["", "Produce latency, as the clients measured it (KIP-714) and the broker:"]
        lines += client_lines
    out = options.get("out")
    lines += [
        "",
        f"results: {out} (summary.json, requests.parquet, samples.parquet); "
        f"the whole summary: --json; charts and tables: kplane report {out}",
    ]
    return "\n".join(lines)
