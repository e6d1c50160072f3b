"""report.html of a small real sweep, opened in headless Chromium: no console error or failed load, every plot
loaded at its file's size, the headline sentence, the headline table with the variants' short names and the
pair verdicts in words within one scroll of the top, the completions table; a screenshot is written
(skipped without a browser). The browser checks themselves are shown to catch a broken page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, NO_BROWSER, chromium
from cli_run_helpers import check_ok

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)]
pytest.importorskip("websockets", reason="the browser tests talk to Chromium through websockets")

PAGE_STATE = """(() => {
  const headline = document.querySelector('table');
  const h2 = Array.from(document.querySelectorAll('h2'));
  const verdicts = h2.find(h => h.textContent === 'Verdicts');
  const below = verdicts && verdicts.nextElementSibling;
  return {
    headings: h2.map(h => h.textContent),
    firstParagraphs: Array.from(document.querySelectorAll('body > p'), p => p.textContent).slice(0, 2),
    viewport: window.innerHeight,
    verdictsBottom: below ? below.getBoundingClientRect().bottom + window.scrollY : null,
    verdictItems: below ? Array.from(below.querySelectorAll('li'), li => li.textContent) : [],
    headers: Array.from(headline.querySelectorAll('th'), c => c.textContent),
    variants: Array.from(headline.querySelectorAll('tbody tr'), r => r.cells[0].textContent),
    headlineHeight: headline.getBoundingClientRect().height,
    images: Array.from(document.images, i => ({
      alt: i.alt, loaded: i.complete && i.naturalWidth > 0, size: [i.naturalWidth, i.naturalHeight],
      shown: i.getBoundingClientRect().width,
    })),
  };
})()"""


def png_size(path: Path) -> list[int]:
    """[width, height] from a PNG file's header (IHDR)."""
    data = path.read_bytes()[16:24]
    return [int.from_bytes(data[:4], "big"), int.from_bytes(data[4:], "big")]


@pytest.fixture(scope="module")
def report(tmp_path_factory, cli_env) -> Path:
    """The report directory of a 4-job sweep (2 losses x 2 seeds of debug=fast, CSV only)."""
    root = tmp_path_factory.mktemp("browser_sweep")
    sweep = root / "sweep"
    args = ["-m", "loss=grpo,sapo", "seed=0,1", "debug=fast", "logger=csv", f"hydra.sweep.dir={sweep}"]
    for command in (
        [sys.executable, "-m", "twinkle_exp", *args],
        [sys.executable, "-m", "twinkle_exp.report", str(sweep)],
    ):
        check_ok(subprocess.run(command, cwd=root, env=cli_env, capture_output=True, text=True, timeout=900))
    return sweep / "report"


def test_the_report_renders_with_its_headline_and_every_plot(report, tmp_path):
    with chromium(tmp_path) as page:
        page.open((report / "report.html").as_uri())
        state = page.evaluate(PAGE_STATE)
        page.screenshot(tmp_path / "report.png")
    assert page.errors == []
    headings = state["headings"]
    assert headings[:2] == ["Variants", "Verdicts"]  # the result first, the tables behind it after
    assert {"Checks", "Plots", "Completions", "Jobs"} <= set(headings)
    assert state["firstParagraphs"][1].startswith("Headline: AUC, mean over seeds, highest first: loss=")
    # The pair verdicts, in words, end within one scroll of the top (two screens' height).
    assert state["verdictsBottom"] is not None and state["verdictsBottom"] <= 2 * state["viewport"], state
    assert len(state["verdictItems"]) == 2  # one pair x (AUC, final accuracy)
    assert all(
        re.match(r"loss=\w+ vs loss=\w+ on .+: (different|inconclusive|equivalent|not tested)", v)
        for v in state["verdictItems"]
    )
    assert state["headers"][:3] == ["variant", "seeds finished / total", "AUC (%) mean [95% CI]"]
    assert state["variants"] == ["loss=grpo", "loss=sapo"]  # shared overrides left out, as the page says
    assert state["headlineHeight"] > 0
    # Each plot the report links in report.md is on the page, decoded at the size of its PNG file.
    plots = re.findall(r"!\[(.+?)\]\((.+?\.png)\)", (report / "report.md").read_text())
    assert len(plots) >= 6
    assert [i["alt"] for i in state["images"]] == [title for title, _ in plots]
    for image, (_, name) in zip(state["images"], plots, strict=True):
        assert image["loaded"] and image["size"] == png_size(report / name) and image["shown"] > 0, image
    assert png_size(tmp_path / "report.png") == [1280, 1000]
    # The completions table: each variant's kept completions, from samples.jsonl (debug=fast: one rollout).
    completions = (report / "report.md").read_text().split("## Completions\n", 1)[1].split("\n## ", 1)[0]
    assert "| loss=grpo (seed 0) | start |" in completions and "| loss=sapo (seed 0) | start |" in completions


def test_the_browser_checks_catch_a_broken_page(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text(
        "<html><body><table><tr><td>x</td></tr></table><img alt='gone' src='missing.png'>"
        "<script>console.error('bad data'); undefined_function();</script></body></html>"
    )
    with chromium(tmp_path) as page:
        page.open(broken.as_uri())
        images = page.evaluate("Array.from(document.images, i => i.complete && i.naturalWidth > 0)")
    assert images == [False]
    assert any("bad data" in e for e in page.errors), page.errors
    assert any("undefined_function" in e for e in page.errors), page.errors
    assert any("missing.png" in e for e in page.errors), page.errors  # the failed load, from the browser
