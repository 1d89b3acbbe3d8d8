"""Java ``.properties`` files, as ``java.util.Properties.load`` reads them, and ``--override``.

Differences from Java, on purpose: files are decoded as UTF-8 (a superset of the ASCII files
Kafka ships; ``\\uXXXX`` escapes still work), and a malformed ``\\u`` escape raises
:class:`ConfigException` instead of ``IllegalArgumentException``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kplane.broker.config.errors import ConfigException

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def load_properties(path: str) -> dict[str, str]:
    """Read a ``.properties`` file (UTF-8) into a dict; later keys win."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigException(f"cannot read properties file {path}: {e}") from e
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text (comments, separators, continuations, escapes); later keys win."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, number)] = _unescape(value, number)
    return props


def apply_overrides(props: Mapping[str, str], overrides: Iterable[str]) -> dict[str, str]:
    """Return ``props`` with each ``key=value`` of ``--override`` applied in order.

    The value may be empty (``key=``) and may itself contain ``=``; an override without ``=`` or
    with an empty key raises :class:`ConfigException`.
    """
    result = dict(props)
    for override in overrides:
        key, sep, value = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigException(
                f'--override: malformed override "{override}", expected key=value'
            )
        result[key] = value
    return result


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Yield (first natural line number, logical line) without comments and blank lines."""
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(natural):
        number = i + 1
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # comment lines are never continued
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            if i >= len(natural):
                line = ""
                break
            line = natural[i].lstrip(_WHITESPACE)
            i += 1
        parts.append(line)
        yield number, "".join(parts)


def _continues(line: str) -> bool:
    """A line continues when it ends with an odd number of backslashes."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped separator: ``=``, ``:`` or whitespace."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in _SEPARATORS or c in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in _SEPARATORS:
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def _unescape(s: str, number: int) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\" or i >= n:
            if c != "\\":
                out.append(c)
            continue
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigException(f"properties line {number}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)
