"""String ops on the host: concatenation, comparison, splitting, normalizing, regex match."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from glow_core.errors import InputError
from glow_core.frontends.onnx.string_values import STRING, objects
from glow_core.runtime.host_ops.table import HostNode, Prepared, elementwise, host_op, text_input


@host_op("StringConcat")
def _string_concat(node: HostNode) -> Prepared:
    """x + y element by element, broadcasting."""

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, y = text_input(node, inputs[0], 0), text_input(node, inputs[1], 1)
        return [elementwise(node, operator.add, x, y)]

    return Prepared(run, (STRING,))


def _any_string_input(node: HostNode) -> bool:
    return any(node.string_inputs)


@host_op("Equal", claims=_any_string_input)
def _equal_strings(node: HostNode) -> Prepared:
    """Equal on string tensors (numeric Equal is compiled): bool, broadcasting."""
    if not all(node.string_input(i) for i in range(2)):
        raise node.refuse("compares a string tensor with a numeric one; both inputs must be strings")

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, y = text_input(node, inputs[0], 0), text_input(node, inputs[1], 1)
        return [elementwise(node, operator.eq, x, y).astype(bool)]

    return Prepared(run, (TensorProto.BOOL,))


@host_op("StringSplit")
def _string_split(node: HostNode) -> Prepared:
    """Each string split as Python's str.split does (whitespace runs when no delimiter), padded.

    The substrings get one more axis, as long as the longest split, padded with ""; the
    second output counts each element's substrings.
    """
    delimiter = node.attr("delimiter", "") or None
    maxsplit = int(node.attr("maxsplit", -1))
    if maxsplit < 0:
        maxsplit = -1

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = text_input(node, inputs[0], 0)
        parts = [s.split(delimiter, maxsplit) for s in x.reshape(-1).tolist()]
        counts = np.asarray([len(p) for p in parts], np.int64).reshape(x.shape)
        width = int(counts.max(initial=0))
        padded = [p + [""] * (width - len(p)) for p in parts]
        return [objects(padded, (*x.shape, width)), counts]

    return Prepared(run, (STRING, TensorProto.INT64))


_CASE_CHANGES: dict[str, Callable[[str], str]] = {
    "NONE": lambda s: s,
    "LOWER": str.lower,
    "UPPER": str.upper,
}


@host_op("StringNormalizer")
def _string_normalizer(node: HostNode) -> Prepared:
    """Drop the stop words, then change case; [C] or [1, C] in, one axis shorter or longer out.

    Stop words are whole elements (the ONNX definition). A case-insensitive match compares
    ``str.casefold`` forms, Unicode's caseless matching; case changes are Python's
    locale-independent Unicode mappings, so the ``locale`` attribute is not consulted.
    """
    action = str(node.attr("case_change_action", "NONE")).upper()
    if action not in _CASE_CHANGES:
        raise node.refuse(f"case_change_action {action!r} is not one of {sorted(_CASE_CHANGES)}")
    change = _CASE_CHANGES[action]
    sensitive = bool(node.attr("is_case_sensitive", 0))
    key: Callable[[str], str] = (lambda s: s) if sensitive else str.casefold
    stops = {key(w) for w in node.attr("stopwords", [])}

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = text_input(node, inputs[0], 0)
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
            raise InputError(
                f"ONNX node {node.name!r} (StringNormalizer) takes a [C] or [1, C] tensor, got {x.shape}"
            )
        kept = [change(s) for s in x.reshape(-1).tolist() if key(s) not in stops]
        if not kept and x.size:
            kept = [""]  # everything dropped: one empty string, as the ONNX definition says
        shape = (len(kept),) if x.ndim == 1 else (1, len(kept))
        return [objects(kept, shape)]

    return Prepared(run, (STRING,))


_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
"""RE2's ASCII classes ``[[:name:]]`` as the ranges Python's ``re`` knows."""

_RE2_ONLY_ESCAPES = "pPQEC"
"""``\\p{Greek}``, ``\\pN``, ``\\Q...\\E``, ``\\C``: RE2 escapes Python's ``re`` lacks."""


def re2_to_python(pattern: str) -> str:
    """An RE2 pattern as a Python ``re`` pattern with the same meaning, or ValueError.

    Python's syntax is nearly a superset of RE2's; the differences that would silently
    match otherwise are translated (``\\z``, ``[[:alpha:]]`` classes) or refused (``\\p``
    Unicode classes, ``\\Q...\\E``, ``\\C``, the ungreedy flag ``U``).
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            escape = pattern[i : i + 2]
            if escape[1] in _RE2_ONLY_ESCAPES:
                raise ValueError(f"{escape!r} is RE2 syntax that Python's re lacks")
            out.append("\\Z" if escape == "\\z" and not in_class else escape)
            i += 2
            continue
        if in_class and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end > 0 else ""
            if name not in _POSIX_CLASSES:
                raise ValueError(f"unknown or negated character class {pattern[i : end + 2]!r}")
            out.append(_POSIX_CLASSES[name])
            i = end + 2
            continue
        if not in_class and pattern.startswith("(?", i):
            flags = re.match(r"\(\?([a-zA-Z-]*)", pattern[i:])
            if flags and "U" in flags.group(1):
                raise ValueError("the ungreedy flag U is RE2 syntax that Python's re lacks")
        out.append(c)
        if c == "[" and not in_class:
            in_class = True
            # A ']' right after '[' or '[^' is a literal, not the end of the class.
            for lead in ("^", "]"):
                if pattern.startswith(lead, i + 1):
                    out.append(lead)
                    i += 1
        elif c == "]" and in_class:
            in_class = False
        i += 1
    return "".join(out)


@host_op("RegexFullMatch")
def _regex_full_match(node: HostNode) -> Prepared:
    """Whether each string matches the RE2 ``pattern`` as a whole (bool, same shape).

    Matched with Python's ``re`` after ``re2_to_python``, with ASCII classes (``\\w``,
    ``\\d``, ``\\s``, ``\\b``) as RE2 has them.
    """
    pattern = node.attr("pattern")
    if pattern is None:
        raise node.refuse("required attribute 'pattern' is missing")
    try:
        regex = re.compile(re2_to_python(pattern), re.ASCII)
    except (ValueError, re.error) as err:
        raise node.refuse(f"pattern {pattern!r} cannot be used: {err}") from None

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = text_input(node, inputs[0], 0)
        found = [regex.fullmatch(s) is not None for s in x.reshape(-1).tolist()]
        return [np.asarray(found, dtype=bool).reshape(x.shape)]

    return Prepared(run, (TensorProto.BOOL,))
