"""Print the configuration reference as a Markdown table:
``python -m kplane.broker.config.docs``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kplane.broker.config.definitions import CONFIG_DEFS, ConfigDef, ConfigType


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
    defs = list(defs)
    for d in (d for d in defs if d.honoured):
        doc = d.doc if d.validator is None else f"{d.doc} Valid values: {d.validator}."
        if d.listener_prefix_required:
            doc += f" Dynamically, only per listener: listener.name.<listener>.{d.name}."
        lines.append(
            f"| `{d.name}` | {d.type.value} | `{_cell(_default(d))}` | {d.dynamic.value} "
            f"| {_cell(doc)} |"
        )
    pending = [d.name for d in defs if not d.honoured]
    if pending:
        lines.append("")
        lines.append(
            "Accepted and validated, but not acted on yet: "
            + ", ".join(f"`{name}`" for name in pending)
            + "."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render_markdown(), end="")


if __name__ == "__main__":
    main()
