"""Kafka's ``ssl.principal.mapping.rules``: certificate subject DN to short principal name.

The value is a comma-separated list of ``DEFAULT`` and ``RULE:pattern/replacement/[LU]``
entries (KIP-371). A ``/`` inside a pattern or replacement is written ``\\/``; commas
inside a rule belong to it. Rules are tried in order: the first whose pattern matches the
whole DN yields the name, ``DEFAULT`` yields the DN itself.

As in Kafka, patterns are Java regexes (compiled here with ``re.ASCII``, Java's default
character classes), the replacement follows ``java.util.regex.Matcher`` rules (``$n``,
``${name}``, ``\\`` escapes the next character) and is applied like ``String.replaceAll``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's KafkaPrincipal.ANONYMOUS: a client that did not authenticate."""
DEFAULT_RULES = "DEFAULT"
_DIGITS = frozenset("0123456789")


class NoMatchingRuleError(Exception):
    """No rule maps the distinguished name (Kafka's ``NoMatchingRule``)."""


class Rule:
    """One mapping rule: ``Rule()`` is ``DEFAULT``, ``Rule(pattern, replacement, case)`` a
    ``RULE:`` entry (``case`` is ``""``, ``"L"`` or ``"U"``). ``ValueError`` if it is bad."""

    __slots__ = ("_parts", "case", "pattern", "replacement")

    def __init__(self, pattern: str | None = None, replacement: str = "", case: str = "") -> None:
        if case not in ("", "L", "U"):
            raise ValueError(f"unknown case flag {case!r} (expected L or U)")
        self.pattern: re.Pattern[str] | None = None
        self.replacement = replacement
        self.case = case
        self._parts: tuple[str | int, ...] = ()
        if pattern is not None:
            try:
                self.pattern = re.compile(pattern, re.ASCII)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
            self._parts = _parse_replacement(replacement, self.pattern)

    @property
    def is_default(self) -> bool:
        return self.pattern is None

    def apply(self, dn: str) -> str | None:
        """The mapped name, or ``None`` when the pattern does not match all of ``dn``."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Kafka substitutes with String.replaceAll, so every match is replaced, including an
        # empty one at the end for patterns like "(.*)"; re.sub behaves the same way.
        name = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(
            part if isinstance(part, str) else (match.group(part) or "") for part in self._parts
        )

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{self.case}"

    def __repr__(self) -> str:
        return f"Rule({self})"


class SslPrincipalMapper:
    """An ordered list of rules mapping subject DNs to principal names."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        """Parse a rules value; ``None`` means Kafka's default, ``DEFAULT``."""
        return cls(_parse(DEFAULT_RULES if text is None else text))

    def get_name(self, distinguished_name: str) -> str:
        """Map a DN (RFC 2253/4514 form); ``NoMatchingRuleError`` if no rule applies."""
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRuleError(
            f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]"
        )

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def parse_rules(text: str | None) -> SslPrincipalMapper:
    """Parse an ``ssl.principal.mapping.rules`` value; ``ValueError`` names a bad rule."""
    return SslPrincipalMapper.from_rules(text)


def _parse(text: str) -> list[Rule]:
    """Split and parse the list; empty entries are skipped, as Kafka does."""
    rules: list[Rule] = []
    text = text.strip()
    pos = 0
    while pos < len(text):
        pos = _skip_space(text, pos)
        start = pos
        if text.startswith("RULE:", pos):
            pattern, pos = _segment(text, pos + len("RULE:"), start, "pattern")
            replacement, pos = _segment(text, pos, start, "replacement")
            case = ""
            if pos < len(text) and text[pos] in "LU":
                case, pos = text[pos], pos + 1
            rule: Rule | None = _compile(text[start:pos], pattern, replacement, case)
        elif text.startswith("DEFAULT", pos):
            rule, pos = Rule(), pos + len("DEFAULT")
        else:
            rule = None
        end = _skip_space(text, pos)
        if end < len(text) and text[end] != ",":
            junk_end = _next_comma(text, end)
            if rule is None or rule.is_default:
                raise ValueError(
                    f"invalid rule {text[start:junk_end]!r}: "
                    "expected DEFAULT or RULE:pattern/replacement/[LU]"
                )
            raise ValueError(
                f"invalid rule {text[start:junk_end]!r}: unexpected {text[end:junk_end]!r} "
                "after the rule (only an L or U flag, right after the last '/', then ',')"
            )
        if rule is not None:
            rules.append(rule)
        pos = end + 1
    return rules


def _compile(source: str, pattern: str, replacement: str, case: str) -> Rule:
    try:
        return Rule(pattern, replacement, case)
    except ValueError as exc:
        raise ValueError(f"invalid rule {source!r}: {exc}") from None


def _segment(text: str, pos: int, start: int, what: str) -> tuple[str, int]:
    """Read up to an unescaped ``/`` (kept escapes intact); return it and the next position."""
    i = pos
    while i < len(text):
        char = text[i]
        if char == "/":
            return text[pos:i], i + 1
        i += 2 if char == "\\" else 1
    raise ValueError(
        f"invalid rule {text[start:]!r}: missing '/' after the {what} "
        "(expected RULE:pattern/replacement/[LU])"
    )


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _next_comma(text: str, pos: int) -> int:
    comma = text.find(",", pos)
    return len(text) if comma < 0 else comma


def _parse_replacement(replacement: str, pattern: re.Pattern[str]) -> tuple[str | int, ...]:
    """Split a Java ``Matcher`` replacement into literal text and group numbers.

    ``$n`` takes as many digits as still name an existing group; as in Kafka, a first
    digit beyond the group count leaves ``$n`` literal. ``${name}`` names a group.
    """
    parts: list[str | int] = []
    i, n = 0, len(replacement)
    while i < n:
        char = replacement[i]
        if char == "\\":
            if i + 1 == n:
                raise ValueError(f"replacement {replacement!r} ends with a lone backslash")
            parts.append(replacement[i + 1])
            i += 2
        elif char != "$":
            parts.append(char)
            i += 1
        elif replacement.startswith("${", i):
            close = replacement.find("}", i)
            name = replacement[i + 2 : close] if close > 0 else replacement[i + 2 :]
            if close < 0 or name not in pattern.groupindex:
                raise ValueError(f"replacement {replacement!r}: no group named {name!r}")
            parts.append(pattern.groupindex[name])
            i = close + 1
        elif i + 1 < n and replacement[i + 1] in _DIGITS:
            group = int(replacement[i + 1])
            if group > pattern.groups:
                parts.append("$")
                i += 1
                continue
            i += 2
            while i < n and replacement[i] in _DIGITS:
                wider = group * 10 + int(replacement[i])
                if wider > pattern.groups:
                    break
                group, i = wider, i + 1
            parts.append(group)
        else:
            raise ValueError(
                f"replacement {replacement!r}: illegal group reference at {replacement[i:]!r} "
                "(write \\$ for a literal $)"
            )
    return tuple(parts)
