"""Config validators: Kafka's ``ConfigDef.Validator``s, each printing its valid values as
Kafka's does, and kplane's stricter ones for configs it acts on.

A validator is called with the config's name and its parsed, non-null value; it raises
ConfigException naming the config when the value is invalid. :func:`kafka_validator` turns a
row of Kafka's config table (its validator class and valid values) into one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kplane.broker.config.errors import ConfigException

Validator = Callable[[str, Any], None]
"""Called with (config name, parsed non-null value); raises ConfigException when invalid."""

CLASS_NAME = re.compile(r"^[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)*$")
"""A dotted class name: a Python import path ``module.Class`` or a Java class name."""


def invalid(name: str, value: Any, expectation: str) -> ConfigException:
    return ConfigException(f'{name}: invalid value "{value}": {expectation}', name=name)


@dataclass(frozen=True, slots=True)
class Range:
    """A number in ``[low, high]``; either bound may be open (None)."""

    low: float | None = None
    high: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if self.low is not None and value < self.low:
            raise invalid(name, value, f"value must be at least {self.low}")
        if self.high is not None and value > self.high:
            raise invalid(name, value, f"value must be no more than {self.high}")

    def __str__(self) -> str:
        if self.high is None:
            return f"[{self.low},...]"
        if self.low is None:
            return f"[...,{self.high}]"
        return f"[{self.low},...,{self.high}]"


def at_least(low: int) -> Range:
    return Range(low=low)


def between(low: int, high: int) -> Range:
    return Range(low=low, high=high)


@dataclass(frozen=True, slots=True)
class RangeOrValue:
    """A number in a range, or one value outside it (``compression.gzip.level``: ``[1,...,9]
    or -1``)."""

    range: Range
    value: int

    def __call__(self, name: str, value: Any) -> None:
        if value != self.value:
            self.range(name, value)

    def __str__(self) -> str:
        return f"{self.range} or {self.value}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string among a fixed set, compared case-insensitively when ``ignore_case`` (Kafka's
    ``ValidString`` and ``CaseInsensitiveValidString``)."""

    choices: tuple[str, ...]
    ignore_case: bool = False

    def __call__(self, name: str, value: Any) -> None:
        ok = (
            value.upper() in (c.upper() for c in self.choices)
            if self.ignore_case
            else value in self.choices
        )
        if not ok:
            raise invalid(name, value, f"expected one of {', '.join(self.choices)}")

    def __str__(self) -> str:
        listed = f"[{', '.join(self.choices)}]"
        return f"(case insensitive) {listed}" if self.ignore_case else listed


@dataclass(frozen=True, slots=True)
class ValidList:
    """A list whose every item is among a fixed set (Kafka's ``ValidList.in``)."""

    choices: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if item not in self.choices:
                raise invalid(
                    name, ",".join(value), f"{item!r} is not one of {', '.join(self.choices)}"
                )

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True, slots=True)
class NonEmptyString:
    """Kafka's ``NonEmptyString``."""

    def __call__(self, name: str, value: Any) -> None:
        if value == "":
            raise invalid(name, value, "String must be non-empty")

    def __str__(self) -> str:
        return "non-empty string"


@dataclass(frozen=True, slots=True)
class MetadataVersions:
    """A metadata version (Kafka's ``MetadataVersionValidator``): one listed, or its release
    without the ``-IV`` suffix, given with at most two numbers (three from ``0.``)."""

    versions: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        parts = value.split(".")
        numbers = 3 if value.startswith("0.") else 2
        key = value if numbers >= len(parts) else ".".join(parts[:numbers])
        if key not in self.versions and key not in (v.split("-")[0] for v in self.versions):
            raise invalid(name, value, f"Version {value} is not a valid version")

    def __str__(self) -> str:
        return f"[{', '.join(self.versions)}]"


_HOST_PORT = re.compile(r"^\[?([0-9A-Za-z\-%._:]+?)\]?:([0-9]+)$")


@dataclass(frozen=True, slots=True)
class HostPorts:
    """A list of ``host:port``, each after ``{id}@`` when ``with_ids`` (KRaft's
    ``controller.quorum.bootstrap.servers`` and ``controller.quorum.voters``)."""

    with_ids: bool = False

    def __call__(self, name: str, value: Any) -> None:
        form = "{id}@{host}:{port}" if self.with_ids else "{host}:{port}"
        for item in value:
            address = item
            if self.with_ids:
                node_id, at, address = item.partition("@")
                if not at or not node_id.isdigit():
                    address = ""
            if not _HOST_PORT.match(address):
                raise invalid(name, ",".join(value), f"each entry should be in the form {form}")

    def __str__(self) -> str:
        return "non-empty list"


_HOST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9.-]*|\[?[0-9A-Fa-f:.]+\]?)$")


def parse_host_counts(name: str, text: str) -> dict[str, int]:
    """``host:count,host:count`` (``max.connections.per.ip.overrides``): the count of each
    host or IP address; ConfigException naming ``name`` for an item that is not one."""
    counts: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        host, _, count = item.rpartition(":")
        host = host.strip()
        if not host or not _HOST.match(host) or not count.strip().isdigit():
            raise invalid(name, text, f"{item!r} is not host:count")
        counts[host.strip("[]")] = int(count)
    return counts


@dataclass(frozen=True, slots=True)
class HostCounts:
    """A comma-separated list of ``host:count`` (Kafka's map of connection overrides)."""

    def __call__(self, name: str, value: Any) -> None:
        parse_host_counts(name, value)

    def __str__(self) -> str:
        return "host:count,host:count,..."


_THROTTLED_REPLICA = re.compile(r"^[0-9]+:[0-9]+$")


@dataclass(frozen=True, slots=True)
class ThrottledReplicaList:
    """``[PartitionId]:[BrokerId],...`` or ``*`` (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, name: str, value: Any) -> None:
        items = [item.strip() for item in value]
        if items == ["*"]:
            return
        for item in items:
            if not _THROTTLED_REPLICA.match(item):
                raise invalid(
                    name,
                    ",".join(value),
                    "must be the literal '*' or a list of replicas in the form "
                    "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...",
                )

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


@dataclass(frozen=True, slots=True)
class ClassNames:
    """A list of dotted Python import paths ``module.Class``."""

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if not CLASS_NAME.match(item):
                raise invalid(name, ",".join(value), f"{item!r} is not a dotted class name")

    def __str__(self) -> str:
        return "import paths module.Class"


def kafka_validator(validator_class: str | None, valid_values: str | None) -> Validator | None:
    """The validator of a row of Kafka's config table: its validator's class (simple name)
    and valid values text. ``NonNullValidator`` gives None: a parsed value is never null.
    ValueError for a class this does not know, so a new table cannot lose a check."""
    if validator_class is None or validator_class == "ConfigDef$NonNullValidator":
        return None
    text = valid_values or ""
    if validator_class == "ConfigDef$Range":
        return _range(text)
    if validator_class in ("ConfigDef$ValidString", "ConfigDef$CaseInsensitiveValidString"):
        ignore_case = validator_class == "ConfigDef$CaseInsensitiveValidString"
        return OneOf(_items(text.removeprefix("(case insensitive) ")), ignore_case)
    if validator_class == "ConfigDef$ValidList":
        return ValidList(_items(text))
    if validator_class == "ConfigDef$NonEmptyString":
        return NonEmptyString()
    if validator_class == "MetadataVersionValidator":
        return MetadataVersions(_items(text))
    if validator_class == "ThrottledReplicaListValidator":
        return ThrottledReplicaList()
    if validator_class == "CompressionType$1$1":  # gzip's level: "[1,...,9] or -1"
        bounds, _, other = text.partition(" or ")
        return RangeOrValue(_range(bounds), int(other))
    if validator_class == "ConfigDef$LambdaValidator":  # the remote log thread pools
        return RangeOrValue(at_least(1), -1)
    if validator_class == "QuorumConfig$ControllerQuorumVotersValidator":
        return HostPorts(with_ids=True)
    if validator_class == "QuorumConfig$ControllerQuorumBootstrapServersValidator":
        return HostPorts()
    raise ValueError(f"no validator for Kafka's {validator_class} ({valid_values})")


def _items(text: str) -> tuple[str, ...]:
    """``[a, b, c]`` -> ``("a", "b", "c")``."""
    return tuple(text.strip("[]").split(", "))


def _range(text: str) -> Range:
    """``[low,...]``, ``[...,high]`` or ``[low,...,high]`` -> Range."""
    bounds = [part for part in text.strip("[]").split(",") if part != "..."]
    numbers = [float(b) if "." in b else int(b) for b in bounds]
    if text.startswith("[..."):
        return Range(high=numbers[0])
    return Range(numbers[0], numbers[1] if len(numbers) > 1 else None)
