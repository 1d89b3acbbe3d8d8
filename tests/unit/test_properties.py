"""Java .properties syntax and --override handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.properties import apply_overrides, load_properties, parse_properties


def test_separators_equals_colon_and_whitespace() -> None:
    props = parse_properties("a=1\nb:2\nc 3\nd = 4\ne\t:\t5\nf\n")
    assert props == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": ""}


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# comment\n! also a comment\n   # indented comment\n\n   \nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


def test_leading_whitespace_ignored_trailing_whitespace_kept() -> None:
    assert parse_properties("   key=value  \n") == {"key": "value  "}


def test_only_first_separator_splits() -> None:
    assert parse_properties("listeners=PLAINTEXT://:9092\nx==y\n") == {
        "listeners": "PLAINTEXT://:9092",
        "x": "=y",
    }


def test_line_continuation_drops_leading_whitespace_of_next_line() -> None:
    text = "listeners=A://:1,\\\n          B://:2\nnext=1\n"
    assert parse_properties(text) == {"listeners": "A://:1,B://:2", "next": "1"}


def test_continuation_line_starting_with_hash_is_not_a_comment() -> None:
    assert parse_properties("a=x\\\n  #y\n") == {"a": "x#y"}


def test_comment_line_is_never_continued() -> None:
    assert parse_properties("# comment \\\nkey=value\n") == {"key": "value"}


def test_even_number_of_backslashes_does_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_continuation_at_end_of_file() -> None:
    assert parse_properties("a=x\\") == {"a": "x"}


def test_escapes() -> None:
    text = r"k\=e\:y\ x=t\tn\nb\\s\=c\:u\u00e9\u0041" + "\n"
    assert parse_properties(text) == {"k=e:y x": "t\tn\nb\\s=c:uéA"}


def test_unknown_escape_drops_backslash() -> None:
    assert parse_properties(r"a=\q") == {"a": "q"}


def test_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigException, match=r"line 2: malformed \\uxxxx"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_crlf_and_cr_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_later_key_wins() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_load_properties_reads_utf8(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("broker.id=3\nname=café\n", encoding="utf-8")
    assert load_properties(str(path)) == {"broker.id": "3", "name": "café"}


def test_load_properties_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigException, match=r"nope\.properties"):
        load_properties(str(missing))


def test_overrides_apply_in_order_and_keep_input() -> None:
    props = {"a": "1", "b": "2"}
    result = apply_overrides(props, ["a=10", "c=x=y", "a=11", "b="])
    assert result == {"a": "11", "b": "", "c": "x=y"}
    assert props == {"a": "1", "b": "2"}


@pytest.mark.parametrize("override", ["novalue", "=value", "  =x"])
def test_malformed_override_names_it(override: str) -> None:
    with pytest.raises(ConfigException) as e:
        apply_overrides({}, [override])
    assert f'"{override}"' in str(e.value)
    assert "--override" in str(e.value)
