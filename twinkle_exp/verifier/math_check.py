"""One answer check with math-verify, run inside a worker process of `TimeoutPool`.

math-verify's own timeouts use `signal.alarm`, which raises "signal only works in main thread" anywhere but
the main thread; and it swallows every `Exception`, so a timeout raised as one would read as a wrong
answer. Here its timeouts are off and the whole check (parse the gold answer, parse the completion,
compare) runs under one interval timer that raises a `BaseException`, in the worker's main thread.

A gold answer that is a number is compared with the completion's stated final answer (`final_answer`), not
with whatever math-verify can evaluate in it: that would score a completion restating "59 + 63 =" as 122.
"""

from __future__ import annotations

import logging
import signal

from twinkle_exp.verifier.final_answer import final_answer, to_fraction

CORRECT, WRONG = "correct", "wrong"
NO_ANSWER = "no_answer"  # nothing in the completion parsed as an answer
BAD_GOLD = "bad_gold"  # the gold answer itself did not parse
TIMED_OUT = "timed_out"  # the check ran out of time (the soft limit here, or the pool's hard one)


class _Deadline(BaseException):
    """Not an `Exception`, so that math-verify's `except Exception` cannot turn it into "wrong"."""


def _raise_deadline(signum: int, frame: object) -> None:
    raise _Deadline


def prepare() -> None:
    """Import math-verify (and sympy) once per worker, before the first check's clock starts."""
    import math_verify  # noqa: F401

    # With its timeouts off, math-verify warns once per process that we must time it ourselves: we do.
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def check_answer(gold: str, completion: str, timeout_s: float) -> str:
    """One of CORRECT, WRONG, NO_ANSWER, BAD_GOLD, TIMED_OUT. Call it in a process's main thread."""
    from math_verify import parse, verify

    previous = signal.signal(signal.SIGALRM, _raise_deadline)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            number = to_fraction(gold)
            if number is not None:
                stated = final_answer(completion)
                if stated is None:
                    return NO_ANSWER
                return CORRECT if stated == number else WRONG
            gold_parsed = parse(gold, parsing_timeout=None)
            if not gold_parsed:
                return BAD_GOLD
            answer = parse(completion, parsing_timeout=None)
            if not answer:
                return NO_ANSWER
            return CORRECT if verify(gold_parsed, answer, timeout_seconds=None) else WRONG
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:  # also when the timer fired just as the check finished: it did run out of time
        return TIMED_OUT
    finally:
        signal.signal(signal.SIGALRM, previous)
