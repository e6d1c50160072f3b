"""The documentation holds together: every relative link and anchor resolves, the README stays short, and
commit hashes (measurement conditions) appear only on the performance page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", REPO / "sweeps" / "README.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`[^`]*`")
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _prose_lines(text: str, keep_code: bool = False) -> list[str]:
    """The lines outside fenced code blocks; inline code removed unless `keep_code` (links in code are not links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line if keep_code else INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return [
        m.group(1) for line in _prose_lines(page.read_text(encoding="utf-8")) for m in LINK.finditer(line)
    ]


def broken_links(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked
            continue
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading with that anchor")
    return problems


def test_the_pages_exist():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    for name in ("README.md", "docs/performance.md", "docs/losses.md", "docs/architecture.md"):
        assert name in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path):
    assert broken_links(page) == []


def test_the_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A section: with `code`\n")
    page.write_text(
        "# Title\n\n[ok](other.md#a-section-with-code) [self](#title) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[in code](missing2.md)`\n"
        "```\n[in a fence](missing3.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading with that anchor"]


def test_github_anchors():
    assert (
        slug("Qwen2.5-0.5B-Instruct on GSM8K with LoRA (GPU)") == "qwen25-05b-instruct-on-gsm8k-with-lora-gpu"
    )
    assert slug("What `policy=hf` adds") == "what-policyhf-adds"
    assert slug("A paper finding: DAPO's clip-higher") == "a-paper-finding-dapos-clip-higher"


def test_the_readme_is_a_five_minute_read():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines; move the depth to docs/"


def test_commit_hashes_only_on_the_performance_page():
    # Measurement conditions (commit, machine, load) belong with the figure, in docs/performance.md.
    for page in PAGES:
        if page.name == "performance.md":
            continue
        hashes = sorted(
            {
                m.group(0)
                for line in _prose_lines(page.read_text(), keep_code=True)
                for m in COMMIT.finditer(line)
            }
        )
        assert hashes == [], f"{page.relative_to(REPO)} names commits {hashes}: link to docs/performance.md"


# A pointer from code or config to the docs: `docs/page.md` or `README`, optionally with a quoted section.
POINTER = re.compile(r"""(docs/[\w-]+\.md|README)(?:'s [\w ]+?| ?,? ['"]([^'"]+)['"])?""")


def broken_pointers(text: str) -> list[str]:
    problems = []
    for m in POINTER.finditer(text):
        page, section = REPO / (m.group(1) if m.group(1) != "README" else "README.md"), m.group(2)
        if not page.exists():
            problems.append(f"{m.group(0)}: no such page")
        elif section and slug(section) not in anchors(page):
            problems.append(f"{m.group(0)}: no such section")
    return problems


def test_code_and_config_point_to_sections_that_exist():
    sources = [*(REPO / "twinkle_exp").rglob("*.py"), *(REPO / "conf").rglob("*.yaml")]
    problems = [f"{p.relative_to(REPO)}: {x}" for p in sources for x in broken_pointers(p.read_text())]
    assert problems == []


def test_the_pointer_checker_sees_a_moved_section():
    assert broken_pointers("""see (README, "Scaling out") and docs/nope.md""") == [
        'README, "Scaling out": no such section',
        "docs/nope.md: no such page",
    ]
    assert broken_pointers("""(docs/experiment.md, 'Top-k and top-p') (README's data flow)""") == []
