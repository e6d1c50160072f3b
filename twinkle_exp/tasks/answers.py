"""Gold-answer extraction: from a dataset's answer field (a worked solution) to the answer a verifier checks."""

from __future__ import annotations

import importlib
from collections.abc import Callable

AnswerExtractor = Callable[[str], str]


def gsm8k_final_answer(solution: str) -> str:
    """GSM8K's gold answer: what follows the last `####` of the worked solution, without thousands commas.

    "She pays 3 * 4 = <<3*4=12>>12 dollars.\\n#### 12" -> "12"; "#### 1,200" -> "1200".
    """
    _, separator, tail = solution.rpartition("####")
    if not separator:
        raise ValueError("no '####' before the final answer")
    answer = tail.strip().replace(",", "")
    if not answer:
        raise ValueError("nothing after '####'")
    return answer


ANSWER_EXTRACTORS: dict[str, AnswerExtractor] = {"gsm8k": gsm8k_final_answer}


def get_answer_extractor(name: str) -> AnswerExtractor:
    """A name in `ANSWER_EXTRACTORS`, or the dotted import path of a function `str -> str`."""
    if name in ANSWER_EXTRACTORS:
        return ANSWER_EXTRACTORS[name]
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise ValueError(
            f"task.answer_extractor={name!r}: not one of {sorted(ANSWER_EXTRACTORS)} and not a dotted path"
        )
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"task.answer_extractor={name!r}: cannot import it ({e})") from e
    if not callable(fn):
        raise ValueError(f"task.answer_extractor={name!r} is not callable")
    return fn
