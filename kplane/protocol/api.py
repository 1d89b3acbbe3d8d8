"""The API table: api key -> kio request/response classes, header versions, codecs.

Everything here is sans-IO: bytes in, typed kio entities out, and back. The controller
APIs kio lacks (LeaderAndIsr, StopReplica, UpdateMetadata) come from
``protocol.controller_schema`` and are served through the same functions.
"""

from __future__ import annotations

import dataclasses
import io
import typing
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.schema.index import PayloadEntityType, api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from kplane.protocol import controller_schema
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.body_scan import scan
from kplane.protocol.fetch_codec import decode_fetch_request
from kplane.protocol.produce_codec import decode_produce_request

E = TypeVar("E")

API_NAMES: dict[int, str] = dict(sorted({**api_key_map, **controller_schema.API_NAMES}.items()))


@cache
def kio_versions(api_key: int) -> range:
    """The versions kio (or controller_schema) has schemas for; empty for an unknown key
    (asked for keys a connection already checked, so the cache stays small)."""
    ours = controller_schema.VERSIONS.get(api_key)
    if ours is not None:
        return ours
    name = api_key_map.get(api_key)
    if name is None:
        return range(0)
    versions = sorted(schema_name_map[name])
    return range(versions[0], versions[-1] + 1)


def _payload_module(api_key: int, version: int, entity_type: PayloadEntityType) -> ModuleType:
    if api_key in controller_schema.VERSIONS:
        return controller_schema.load_payload_module(api_key, version, entity_type)
    return load_payload_module(api_key, version, entity_type)


@cache
def request_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding the request entities of ``api_key`` at ``version``."""
    return _payload_module(api_key, version, EntityType.request)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding the response entities of ``api_key`` at ``version``."""
    return _payload_module(api_key, version, EntityType.response)


def _payload_class(module: ModuleType, entity_type: EntityType) -> type[Any]:
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and getattr(value, "__type__", None) is entity_type
            and value.__module__ == module.__name__
        ):
            return value
    raise LookupError(f"no {entity_type.name} entity in {module.__name__}")


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    """The kio request class of ``api_key`` at ``version``."""
    return _payload_class(request_module(api_key, version), EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The kio response class of ``api_key`` at ``version``."""
    return _payload_class(response_module(api_key, version), EntityType.response)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of ``api_key`` uses compact types and tagged fields."""
    return bool(request_class(api_key, version).__flexible__)


@cache
def first_flexible_version(api_key: int) -> int | None:
    """Kafka's flexible versions are always "N+": the N for ``api_key``, or None."""
    for version in kio_versions(api_key):
        if is_flexible(api_key, version):
            return version
    return None


def request_header_version(api_key: int, version: int) -> int:
    """Request header v2 for flexible versions, v1 otherwise (v0 is ControlledShutdown v0).
    Any version, served or not, and any key: a header is read before either is checked."""
    if api_key == 7 and version == 0:
        return 0
    if api_key not in API_NAMES:  # a key no schema has: nothing cached for it
        return 1
    flexible = first_flexible_version(api_key)
    return 2 if flexible is not None and version >= flexible else 1


@cache
def response_header_version(api_key: int, version: int) -> int:
    """Response header v1 for flexible versions; ApiVersions always answers with v0.
    (Asked only for versions served, so the cache stays small.)"""
    if api_key == 18:
        return 0
    return 1 if is_flexible(api_key, version) else 0


_READERS: dict[type[Any], Callable[[Any, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[io.BytesIO, Any], None]] = {}


def _reader(cls: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def warm(versions: dict[int, range], stop: Callable[[], bool] = lambda: False) -> None:
    """Load the classes and codecs of every served version ahead of the first request;
    ``stop`` is asked between APIs (a shutdown need not wait for the whole warm-up)."""
    for key, served in versions.items():
        if stop():
            return
        for version in served:
            _reader(request_class(key, version))
            _writer(response_class(key, version))


def _decode(cls: type[Any], buffer: Any, offset: int) -> Any:
    """Scan the body against its schema (``MalformedBody`` when it does not fit), then
    decode it with kio; unknown tagged fields are left out (KIP-482)."""
    data, start = scan(cls, buffer, offset)
    value, _size = _reader(cls)(data, start)
    return value


def decode_request(api_key: int, version: int, buffer: Any, offset: int = 0) -> Any:
    """Decode a request body starting at ``offset``; raises on malformed bytes."""
    return _decode(request_class(api_key, version), buffer, offset)


def read_request(api_key: int, version: int, buffer: Any, offset: int = 0) -> Any:
    """A request body as the broker reads it: Produce and Fetch by their hand codecs (a
    :class:`~kplane.protocol.produce_codec.ProduceRequestData`, a
    :class:`~kplane.protocol.fetch_codec.FetchRequestData`), every other API with
    :func:`decode_request`; raises on malformed bytes."""
    if api_key == ApiKey.PRODUCE:
        return decode_produce_request(version, buffer, offset)
    if api_key == ApiKey.FETCH:
        return decode_fetch_request(version, buffer, offset)
    return decode_request(api_key, version, buffer, offset)


def decode_response(api_key: int, version: int, buffer: Any, offset: int = 0) -> Any:
    """Decode a response body starting at ``offset`` (used by kplane's client and tests)."""
    return _decode(response_class(api_key, version), buffer, offset)


def encode(entity: Any) -> bytes:
    """Serialize any kio entity to bytes."""
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def write_entity(out: io.BytesIO, entity: Any) -> None:
    """Serialize ``entity`` onto ``out``."""
    _writer(type(entity))(out, entity)


_FIELDS: dict[type[Any], tuple[frozenset[str], dict[str, Callable[[], Any]]]] = {}


def _field_defaults(cls: type[Any]) -> tuple[frozenset[str], dict[str, Callable[[], Any]]]:
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    names = set()
    fillers: dict[str, Callable[[], Any]] = {}
    for f in dataclasses.fields(cls):
        names.add(f.name)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        fillers[f.name] = _zero_for(hints[f.name], f.metadata.get("kafka_type"))
    _FIELDS[cls] = (frozenset(names), fillers)
    return _FIELDS[cls]


def _zero_for(hint: Any, kafka_type: str | None) -> Callable[[], Any]:
    args = typing.get_args(hint)
    if type(None) in args:
        return lambda: None
    origin = typing.get_origin(hint)
    if origin is tuple:
        return tuple
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        entity: type[Any] = hint
        return lambda: make(entity)
    if kafka_type == "string":
        return str
    if kafka_type in ("bytes", "records"):
        return bytes
    if kafka_type == "bool":
        return lambda: False
    if kafka_type == "uuid":
        import uuid

        return lambda: uuid.UUID(int=0)
    if kafka_type == "error_code":
        from kplane.protocol.errors import ErrorCode

        return lambda: ErrorCode.none
    if kafka_type == "datetime_i64":
        import datetime

        return lambda: datetime.datetime.fromtimestamp(0, datetime.UTC)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        import datetime

        return lambda: datetime.timedelta(0)
    return lambda: hint(0) if callable(hint) else 0


def make(cls: type[E], /, **values: Any) -> E:
    """Build a kio entity of any version from one set of values.

    Values for fields this version lacks are dropped; fields it has that were not given
    take their schema default, or the zero of their type. One handler can so answer
    every version of its API with one call.
    """
    names, fillers = _field_defaults(cls)
    kwargs = {k: v for k, v in values.items() if k in names}
    for name, filler in fillers.items():
        if name not in kwargs:
            kwargs[name] = filler()
    return cls(**kwargs)
