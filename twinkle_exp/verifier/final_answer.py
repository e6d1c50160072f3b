"""The final answer of a completion, as a number, for gold answers that are numbers.

math-verify looks for any expression it can evaluate, so a completion that restates the question
("59 + 63 =", "The answer is 59+63") scores as if it had answered 122. Here the answer is one number the
completion states, never something computed from it:

- the content of the last `\\boxed{...}` when there is one, which must then be a single number (an
  unclosed box is no answer);
- otherwise the last number in the text, unless it is an operand: followed by `=` or an arithmetic
  operator (`+ - * / × ÷ ^`) and then a digit or the end, or preceded by such an operator that follows a
  number (so "59 + 63 =" and "59+63" have no final answer, "59 + 63 = 122" answers 122, "-5" is -5).

A number is an integer or decimal (`72`, `72.0`, `-3.5`, `1,234` with thousands commas), a fraction
`a/b`, or `\\frac{a}{b}` (also `\\dfrac`, `\\tfrac`), optionally inside `$...$`; text around it (units,
`%`, a full stop) is ignored; a number inside a word (`x2`, `1.5e3`) is not one. Two numbers are equal when they are the same rational number: 72 = 72.0,
0.5 = 1/2 = \\frac{1}{2}, but 0.333 != 1/3.
"""

from __future__ import annotations

import re
from fractions import Fraction

_INT = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
_FRAC = r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}"
# No number starts inside a word ("x2", "1.5e3"); a sign belongs to it only where no word character or
# closing bracket precedes the sign.
_NUMBER = re.compile(
    rf"(?P<latex>-?{_FRAC})"
    rf"|(?P<plain>(?:(?<![\w.)\]}}])-|(?<![\w.])){_INT}(?:\.\d+)?(?:\s*/\s*{_INT}(?![.\d]))?)"
)
_OPERATORS = "=+-*/×÷^"
_BINARY_BEFORE = re.compile(rf"[\d)\]}}]\s*[{re.escape(_OPERATORS[1:])}]$")
_OPERATOR_AFTER = re.compile(rf"^[{re.escape(_OPERATORS)}]\s*(?:\d|\\|\(|$)")
_BOXED = "\\boxed{"


def to_fraction(text: str) -> Fraction | None:
    """`text` as an exact number when the whole of it (spaces and `$` aside) is one number, else None."""
    text = text.strip().strip("$").strip()
    match = _NUMBER.fullmatch(text)
    return _value(match) if match else None


def final_answer(completion: str) -> Fraction | None:
    """The completion's final answer as a number (see the module's docstring), or None when it has none."""
    if _BOXED in completion:
        boxed = _last_boxed(completion)
        return None if boxed is None else to_fraction(boxed)  # an unclosed box: the answer was cut off
    matches = list(_NUMBER.finditer(completion))
    if not matches:
        return None
    last = matches[-1]
    before, after = completion[: last.start()].rstrip(), completion[last.end() :].lstrip()
    if _OPERATOR_AFTER.match(after) or _BINARY_BEFORE.search(before):
        return None  # an operand of an expression, not a stated result
    return _value(last)


def _value(match: re.Match) -> Fraction | None:
    if match.group("latex") is not None:
        numerator, denominator = int(match.group(2)), int(match.group(3))
        sign = -1 if match.group("latex").startswith("-") else 1
    else:
        text = match.group("plain").replace(",", "").replace(" ", "")
        top, _, bottom = text.partition("/")
        numerator, denominator = Fraction(top), Fraction(bottom or 1)
        sign = 1
    if denominator == 0:
        return None
    return sign * Fraction(numerator) / Fraction(denominator)


def _last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}`, braces balanced; None when there is none or it is unclosed."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None
