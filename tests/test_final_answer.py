"""The stated final answer of a completion: what `reward=math` compares with a numeric gold answer."""

from __future__ import annotations

from fractions import Fraction

import pytest

from twinkle_exp.verifier.final_answer import final_answer, to_fraction


@pytest.mark.parametrize(
    ("completion", "value"),
    [
        ("72", 72),
        ("72.0", 72),
        (r"\boxed{72}", 72),
        (r"so the total is $\boxed{72}$ apples", 72),
        (r"$\frac{1}{2}$", Fraction(1, 2)),
        (r"\boxed{\dfrac{3}{4}}", Fraction(3, 4)),
        (r"\boxed{-\tfrac{3}{4}}", Fraction(-3, 4)),
        ("0.5", Fraction(1, 2)),
        ("x = 3/4", Fraction(3, 4)),
        ("The answer is 72.", 72),
        ("The answer is -5.", -5),
        ("1,234 apples", 1234),
        ("59 + 63 = 122", 122),
        ("50%", 50),
        ("a=5", 5),
    ],
)
def test_a_stated_number_is_the_answer(completion, value):
    assert final_answer(completion) == value


@pytest.mark.parametrize(
    "completion",
    [
        "59 + 63 =",  # the question restated: math-verify evaluates it to 122
        "The answer is 59+63",
        "0 + 63 =",  # even where the last operand equals the sum
        "(59+63)",
        "3 - 5",
        "5^2",
        r"\boxed{59+63}",  # a boxed expression is not a stated number
        r"\boxed{72",  # unclosed
        "no number here",
        "",
        "x2",
    ],
)
def test_an_expression_or_no_number_is_no_answer(completion):
    assert final_answer(completion) is None


def test_gold_answers_are_numbers_only_when_wholly_one():
    assert to_fraction(" 72 ") == 72
    assert to_fraction(r"$\frac{1}{2}$") == Fraction(1, 2)
    assert to_fraction("1/2") == Fraction(1, 2)
    assert to_fraction(r"\sqrt{2}") is None
    assert to_fraction("2^{10}") is None
    assert to_fraction("72 apples") is None
    assert to_fraction("1/0") is None
