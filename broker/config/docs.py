"""Print the configuration reference as a Markdown table: ``python -m broker.config.docs``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker.config.definitions import CONFIG_DEFS, ConfigDef, ConfigType


def _default(d: ConfigDef) -> str:
    value: Any = d.default
    if value is None:
        return "null"
    if d.type is ConfigType.BOOLEAN:
        return str(value).lower()
    if d.type is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(defs: Iterable[ConfigDef] = CONFIG_DEFS) -> str:
    """One row per config: name | type | default | dynamic scope | description."""
    lines = [
        "| name | type | default | dynamic scope | description |",
        "|---|---|---|---|---|",
    ]
    for d in defs:
        doc = d.doc if d.validator is None else f"{d.doc} Valid values: {d.validator}."
        lines.append(
            f"| `{d.name}` | {d.type.value} | `{_cell(_default(d))}` | {d.dynamic.value} "
            f"| {_cell(doc)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render_markdown(), end="")


if __name__ == "__main__":
    main()
