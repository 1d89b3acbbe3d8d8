"""SubscribedTopicRegex: Kafka compiles it with RE2J, so a pattern is refused when it uses
what RE2 lacks (backreferences, lookaround, atomic groups, possessive quantifiers,
conditionals, inline comments) even where Python's ``re`` would take it; the rest is
compiled with ``re`` (RE2's ``\\z`` as Python's ``\\Z``) and matches whole topic names.

RE2 matches in linear time, Python's backtracking ``re`` does not: a repeated group that
itself holds a repetition or an alternation (``(a+)+``, ``(a|ab)*``) can take exponential
time on a topic name, so such patterns are refused too, where Kafka would take them."""

from __future__ import annotations

import functools
import re
import re._parser as sre_parse
from re._constants import BRANCH, MAX_REPEAT, MIN_REPEAT, SUBPATTERN
from typing import Any

_UNSUPPORTED_GROUPS = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?P=", "(?(", "(?#")


class InvalidRegex(ValueError):
    """A pattern RE2J would refuse."""


def _check_re2(pattern: str) -> str:
    """The pattern in Python's syntax, or InvalidRegex for what RE2 does not support."""
    out: list[str] = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not nxt:
                raise InvalidRegex("trailing backslash")
            if not in_class and nxt in "123456789":
                raise InvalidRegex(f"backreference \\{nxt} at {i}")
            if nxt in "Z":
                raise InvalidRegex(f"invalid escape \\{nxt} at {i}")
            out.append("\\Z" if nxt == "z" else pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # a leading ] is literal
                out.append("[]")
                i += 2
                continue
        elif c == "(":
            for group in _UNSUPPORTED_GROUPS:
                if pattern.startswith(group, i):
                    raise InvalidRegex(f"unsupported group {group} at {i}")
        elif c == "+" and i > 0 and pattern[i - 1] in "*+?}" and not _escaped(pattern, i - 1):
            raise InvalidRegex(f"possessive quantifier at {i}")
        out.append(c)
        i += 1
    return "".join(out)


def _escaped(pattern: str, i: int) -> bool:
    backslashes = 0
    while i - 1 - backslashes >= 0 and pattern[i - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _check_backtracking(items: Any, repeated: bool = False) -> None:
    """InvalidRegex for a repetition (of more than one) or an alternation inside one."""
    for op, arg in items:
        if op in (MAX_REPEAT, MIN_REPEAT):
            low, high, sub = arg
            if repeated and high != low:
                raise InvalidRegex("nested repetition (exponential backtracking)")
            _check_backtracking(sub, repeated or high > 1)
        elif op is BRANCH:
            if repeated:
                raise InvalidRegex("alternation inside a repetition (exponential backtracking)")
            for branch in arg[1]:
                _check_backtracking(branch, repeated)
        elif op is SUBPATTERN:
            _check_backtracking(arg[-1], repeated)


@functools.lru_cache(maxsize=256)
def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; InvalidRegex when RE2J would refuse it, or it could backtrack
    exponentially."""
    translated = _check_re2(pattern)
    try:
        compiled = re.compile(translated)
        _check_backtracking(sre_parse.parse(translated).data)
    except re.error as exc:
        raise InvalidRegex(str(exc)) from exc
    return compiled
