"""The docs follow the loss registry: every registered loss has its row in docs/losses.md, and the prose
states no count of losses that a new one would make stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twinkle_exp.loss import LOSSES

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", REPO / "sweeps" / "README.md", *(REPO / "docs").glob("*.md")])
# A table row naming the loss: "| `GRPOLoss` (`grpo`) |" (the six) or "| `dapo` | `DAPOLoss` |" (the zoo).
ROW = re.compile(r"^\| `(\w+)` \((`\w+`)\) \||^\| `(\w+)` \| `(\w+)` \|", re.MULTILINE)


def _rows() -> dict[str, str]:
    """{loss name: class name} of the loss tables of docs/losses.md."""
    rows = {}
    for m in ROW.finditer((REPO / "docs" / "losses.md").read_text()):
        if m.group(1):
            rows[m.group(2).strip("`")] = m.group(1)
        else:
            rows[m.group(3)] = m.group(4)
    return rows


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_registered_loss_has_its_docs_row(name):
    assert _rows().get(name) == LOSSES[name].__name__, f"docs/losses.md has no row for {name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_counts_the_losses(page):
    stale = re.findall(r"\b(?:twelve|eighteen|thirteen|nineteen)\b", page.read_text(), flags=re.IGNORECASE)
    assert not stale, f"{page.name} counts the losses ({stale}); the registry's list is the count"
