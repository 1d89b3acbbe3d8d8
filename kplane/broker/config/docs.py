"""Print the configuration reference as a Markdown table:
``python -m kplane.broker.config.docs``."""

from __future__ import annotations

from collections.abc import Iterable

from kplane.broker.config.definitions import CONFIG_DEFS, ConfigDef


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(defs: Iterable[ConfigDef] = CONFIG_DEFS) -> str:
    """One row per config kplane acts on: name | type | default | dynamic scope |
    description; then the names of Kafka's configs it accepts but does not act on."""
    lines = [
        "| name | type | default | dynamic scope | description |",
        "|---|---|---|---|---|",
    ]
    defs = list(defs)
    for d in (d for d in defs if d.honoured):
        doc = d.description
        if d.validator is not None:
            doc += f" Valid values: {d.validator}."
        if d.listener_prefix_required:
            doc += f" Dynamically, only per listener: listener.name.<listener>.{d.name}."
        default = "null" if d.default_text is None else d.default_text
        lines.append(
            f"| `{d.name}` | {d.type.value} | `{_cell(default)}` | {d.dynamic.value} "
            f"| {_cell(doc)} |"
        )
    pending = [d.name for d in defs if not d.honoured]
    if pending:
        lines.append("")
        lines.append(
            "Kafka 3.9's other configs are accepted, validated, stored and described as Kafka "
            "does, and named at start-up when set, but not acted on: "
            + ", ".join(f"`{name}`" for name in pending)
            + "."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render_markdown(), end="")


if __name__ == "__main__":
    main()
