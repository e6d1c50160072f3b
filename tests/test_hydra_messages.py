"""Hydra's composition errors, as it prints them (hydra-core 1.3), condensed into one line each."""

from __future__ import annotations

import pytest

from twinkle_exp.config.checks.hydra_messages import condense

HINT = "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"

CASES = [
    (
        "Could not override 'rollout.engine'.\nTo append to your config use +rollout.engine=vllm\n"
        "Key 'engine' not in 'RolloutConfig'\n    full_key: rollout.engine\n    reference_type=RolloutConfig\n"
        "    object_type=RolloutConfig\n" + HINT,
        "rollout.engine=vllm: no such setting (RolloutConfig has no field 'engine'; --cfg job shows the settings)",
    ),
    (
        "Error merging override optim.lr=abc\nValue 'abc' of type 'str' could not be converted to Float\n"
        "    full_key: optim.lr\n    reference_type=OptimConfig\n    object_type=OptimConfig\n" + HINT,
        "optim.lr=abc: Value 'abc' of type 'str' could not be converted to Float",
    ),
    (
        "In 'config': Could not find 'loss/nope'\n\nAvailable options in 'loss':\n\tbnpo\n\tgrpo\n"
        "Config search path:\n\tprovider=hydra, path=pkg://hydra.conf\n" + HINT,
        "loss=nope: no such option in loss; choose one of bnpo, grpo",
    ),
    (
        "Error parsing override 'optim.lr'\nmissing EQUAL at '<EOF>'\n"
        "See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details\n" + HINT,
        "optim.lr: Hydra cannot parse this override (missing EQUAL at '<EOF>'); write key=value",
    ),
]


@pytest.mark.parametrize(
    ("printed", "line"), CASES, ids=["unknown-key", "wrong-type", "no-option", "unparsable"]
)
def test_each_composition_error_becomes_one_line_naming_key_value_and_problem(printed, line):
    assert condense(printed) == line


def test_an_unrecognised_message_keeps_its_own_first_lines_on_one_line():
    printed = "Something new went wrong\n    detail: indented\nAnd why\n" + HINT
    assert condense(printed) == "Something new went wrong; And why"
