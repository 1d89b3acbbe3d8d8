"""Write the controller schema packages from the JSON message schemas in ``json/``.

``python -m kplane.protocol.controller_schema.generate`` (``make schemas``) rewrites every file of
``leader_and_isr/``, ``stop_replica/`` and ``update_metadata/`` from the ``<Api>Request.json``
and ``<Api>Response.json`` pairs, which follow Apache Kafka's message-schema format; ``--out
DIR`` writes the packages under DIR instead. The output is kio's generated style: one module
per version and direction, frozen slotted dataclasses, structs before their first use.
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).parent
JSON_DIR = PACKAGE / "json"
JSON_PATH = "protocol/controller_schema/json"
"""``JSON_DIR`` as the header line of every generated file names it."""
KAFKA_PATH = "clients/src/main/resources/common/message"
PRIVATE_API_KEYS = 10000
"""Api keys from here on are kplane's own, unknown to Kafka and its clients."""
LINE_LENGTH = 100
"""A field docstring stays on one line if it fits in this many columns..."""
WRAP_WIDTH = 96
"""...or else is wrapped at this many, between lines of quotes."""

INTEGERS = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}
BUILTINS = {"bool": "bool", "string": "str"}
ENTITY_TYPES = {("int32", "brokerId"): "BrokerId", ("string", "topicName"): "TopicName"}
WORD = re.compile(r"KRaft|[A-Z]?[a-z0-9]+")
SHADOWING = frozenset({"type"})
"""Attribute names that get a trailing ``_``: the class bodies use the builtin."""

Field = dict[str, Any]


def versions(spec: str) -> range:
    """A JSON version spec ("3", "0-4", "2+", "none") as a range of versions."""
    if spec == "none":
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), 1 << 15)
    low, _, high = spec.partition("-")
    return range(int(low), int(high or low) + 1)


def snake_case(name: str) -> str:
    """``isKRaftController`` -> ``is_kraft_controller``, ``V0Host`` -> ``v0_host``."""
    words = WORD.findall(name)
    if "".join(words) != name:
        raise ValueError(f"cannot split {name!r} into words")
    return "_".join(word.lower() for word in words)


def attribute(name: str) -> str:
    """The dataclass attribute of the JSON field ``name``."""
    snake = snake_case(name)
    return f"{snake}_" if snake in SHADOWING else snake


@dataclass(frozen=True)
class Message:
    """One JSON message schema."""

    path: Path
    name: str
    api_key: int
    kind: str
    valid: range
    flexible: range
    fields: list[Field]
    structs: dict[str, list[Field]]

    @classmethod
    def load(cls, path: Path) -> Message:
        schema = json.loads(path.read_text())
        structs = {s["name"]: s["fields"] for s in schema.get("commonStructs", ())}
        for field in _walk(schema["fields"]):
            if "fields" in field:
                structs[field["type"].removeprefix("[]")] = field["fields"]
        return cls(
            path=path,
            name=schema["name"],
            api_key=schema["apiKey"],
            kind=schema["type"],
            valid=versions(schema["validVersions"]),
            flexible=versions(schema["flexibleVersions"]),
            fields=schema["fields"],
            structs=structs,
        )


def _walk(fields: list[Field]) -> Iterator[Field]:
    for field in fields:
        yield field
        yield from _walk(field.get("fields", []))


class Module:
    """The source of one ``v<N>/<request|response>.py``: imports, then one class per struct."""

    def __init__(self, message: Message, version: int) -> None:
        self.message, self.version = message, version
        self.header = "RequestHeader" if message.kind == "request" else "ResponseHeader"
        self.imports: dict[str, set[str]] = {
            "typing": {"ClassVar"},
            "dataclasses": {"dataclass"},
            "kio.static.constants": {"EntityType"},
            "kio.static.primitive": {"i16"},
            f"kio.schema.{message.kind}_header.v{self.header_version}.header": {self.header},
        }
        self.classes: list[str] = []
        self.done: set[str] = set()
        self._add_class(message.name, message.kind, message.fields)

    @property
    def flexible(self) -> bool:
        return self.version in self.message.flexible

    @property
    def header_version(self) -> int:
        return int(self.flexible) + (1 if self.message.kind == "request" else 0)

    def _present(self, fields: list[Field]) -> list[Field]:
        return [f for f in fields if self.version in versions(f["versions"])]

    def _add_class(self, name: str, entity_type: str, fields: list[Field]) -> None:
        self.done.add(name)
        present = self._present(fields)
        for field in present:
            struct = field["type"].removeprefix("[]")
            if struct in self.message.structs and struct not in self.done:
                self._add_class(struct, "nested", self.message.structs[struct])
        lines = [
            "@dataclass(frozen=True, slots=True, kw_only=True)",
            f"class {name}:",
            f"    __type__: ClassVar = EntityType.{entity_type}",
            f"    __version__: ClassVar[i16] = i16({self.version})",
            f"    __flexible__: ClassVar[bool] = {self.flexible}",
            f"    __api_key__: ClassVar[i16] = i16({self.message.api_key})",
            f"    __header_schema__: ClassVar[type[{self.header}]] = {self.header}",
        ]
        for field in present:
            lines.append(f"    {attribute(field['name'])}: {self._declaration(field)}")
            if "about" in field:
                lines.extend(docstring(field["about"]))
        self.classes.append("\n".join(lines) + "\n")

    def _declaration(self, field: Field) -> str:
        """What follows ``<attribute>:`` in the class body."""
        kind: str = field["type"]
        inner = kind.removeprefix("[]")
        if inner in self.message.structs:
            if inner == kind or "nullableVersions" in field:
                raise ValueError(f"{self.message.name}: unsupported struct field {field}")
            return f"tuple[{inner}, ...]"
        annotation, kafka_type = self._scalar(inner, field)
        metadata = f'{{"kafka_type": "{kafka_type}"'
        if "tag" in field and self.version in versions(field["taggedVersions"]):
            metadata += f', "tag": {field["tag"]}'
        default = ""
        if kind.startswith("[]"):
            annotation, default = f"tuple[{annotation}, ...]", "()"
        elif "default" in field:
            default = _default(annotation, str(field["default"]))
        if self.version in versions(field.get("nullableVersions", "none")):
            annotation += " | None"
        default = f", default={default}" if default else ""
        self.imports["dataclasses"].add("field")
        return f"{annotation} = field(metadata={metadata}}}{default})"

    def _scalar(self, kind: str, field: Field) -> tuple[str, str]:
        """The annotation and the ``kafka_type`` of a non-array field of type ``kind``."""
        if (kind, field.get("entityType")) in ENTITY_TYPES:
            return self._use("kio.schema.types", ENTITY_TYPES[kind, field["entityType"]]), kind
        if "entityType" in field:
            raise ValueError(f"{self.message.name}: unsupported entityType in {field}")
        if kind == "int16" and field["name"] == "ErrorCode":
            return self._use("kio.schema.errors", "ErrorCode"), "error_code"
        if kind == "uuid":
            self.imports["uuid"] = set()
            return "uuid.UUID | None", kind
        if kind in INTEGERS:
            return self._use("kio.static.primitive", INTEGERS[kind]), kind
        if kind in BUILTINS:
            return BUILTINS[kind], kind
        raise ValueError(f"{self.message.name}: unsupported type in {field}")

    def _use(self, module: str, name: str) -> str:
        self.imports.setdefault(module, set()).add(name)
        return name

    def source(self) -> str:
        api = self.message.name.removesuffix(self.message.kind.title())
        origin = (
            ["kplane's own API (not Kafka's): fault injection, see broker/server/faults.py."]
            if self.message.api_key >= PRIVATE_API_KEYS
            else [f"``{KAFKA_PATH}/{self.message.path.name}``."]
        )
        intro = "," if self.message.api_key >= PRIVATE_API_KEYS else ", from Kafka's"
        head = [
            header_line(self.message.path.name),
            f'"""{api} {self.message.kind} v{self.version}{intro}',
            *origin,
            '"""',
            "",
            *self._import_lines(),
        ]
        return "\n".join(head) + "\n\n\n" + "\n\n".join(self.classes)

    def _import_lines(self) -> list[str]:
        """isort's order: stdlib, a blank line, kio; ``import`` before ``from``."""
        stdlib = ["import uuid"] if "uuid" in self.imports else []
        stdlib += [self._from("dataclasses"), self._from("typing")]
        kio = [self._from(m) for m in sorted(self.imports) if m.startswith("kio.")]
        return [*stdlib, "", *kio]

    def _from(self, module: str) -> str:
        names = sorted(self.imports[module], key=_natural)
        return f"from {module} import {', '.join(names)}"


def _natural(name: str) -> list[Any]:
    """Sort key putting ``i8`` before ``i16``, as isort does."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _default(annotation: str, value: str) -> str:
    if annotation == "bool":
        return {"false": "False", "true": "True"}[value]
    return f"{annotation}({int(value)})"


def docstring(text: str, indent: str = "    ") -> list[str]:
    """A field docstring: one line if it fits, else wrapped between lines of quotes."""
    if '"""' in text or "\\" in text:
        raise ValueError(f"about text needs escaping: {text!r}")
    line = f'{indent}"""{text}"""'
    if len(line) <= LINE_LENGTH:
        return [line]
    wrapped = textwrap.wrap(
        text, WRAP_WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )
    return [f'{indent}"""', *wrapped, f'{indent}"""']


def header_line(json_name: str) -> str:
    return f"# Generated by `make schemas` from {JSON_PATH}/{json_name}."


def render(json_dir: Path = JSON_DIR) -> dict[Path, str]:
    """Every generated file, by path relative to the ``controller_schema`` package."""
    files: dict[Path, str] = {}
    for request_path in sorted(json_dir.glob("*Request.json")):
        request = Message.load(request_path)
        response = Message.load(json_dir / request_path.name.replace("Request", "Response"))
        if (request.api_key, request.valid) != (response.api_key, response.valid):
            raise ValueError(f"{request.name} and {response.name} disagree on key or versions")
        api = request.name.removesuffix("Request")
        package = Path(snake_case(api))
        sources = header_line(f"{api}*.json") + "\n"
        files[package / "__init__.py"] = f'{sources}"""{api}: one subpackage per version."""\n'
        for version in request.valid:
            files[package / f"v{version}" / "__init__.py"] = sources
            for message in (request, response):
                path = package / f"v{version}" / f"{message.kind}.py"
                files[path] = Module(message, version).source()
    return files


def write(out: Path = PACKAGE, json_dir: Path = JSON_DIR) -> list[Path]:
    """Write the generated packages under ``out``, removing ``.py`` files they no longer have."""
    rendered = render(json_dir)
    files = {out / path: text for path, text in rendered.items()}
    for package in {out / path.parts[0] for path in rendered}:
        for stale in set(package.rglob("*.py")) - files.keys():
            stale.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(files)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PACKAGE, help="where the packages go")
    args = parser.parse_args(argv)
    print(f"wrote {len(write(args.out))} files under {args.out}")


if __name__ == "__main__":
    main()
