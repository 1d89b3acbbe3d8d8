"""The README's configuration reference is the one the config table generates."""

from pathlib import Path

from broker.config.docs import render_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_config_reference_is_current() -> None:
    text = README.read_text()
    start = text.index("-->", text.index("<!-- config-reference:start")) + len("-->\n")
    end = text.index("<!-- config-reference:end -->")
    assert text[start:end] == render_markdown(), "run: python -m broker.config.docs"
