"""README and docs/ say what kvsched does today: the sentences issue 23 found untrue stay true (the
variant keys and the presets' checks have their own tests: test_scenario, test_presets)."""

from __future__ import annotations

import re
from pathlib import Path

from kvsched.records.metrics import SUMMARY_KEYS

REPO = Path(__file__).resolve().parent.parent
README = " ".join("\n".join(page.read_text(encoding="utf-8") for page in
                            [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]).split())
"""README and the docs/ pages it links, as one text."""


def test_keys_readme_offers_for_slos_are_measured():
    """`tpot_p99` and `itl_p99` are summary keys, and README no longer says otherwise."""
    assert {"tpot_p99", "itl_p99"} <= set(SUMMARY_KEYS)
    assert "`tpot_p99` and `itl_p99` included" in README
    assert not re.search(r"(does not|doesn't) measure( yet)?", README)


def test_readme_never_says_there_is_no_prefix_cache():
    assert not re.search(r"no prefix cach\w* yet", README, flags=re.I)
    assert "prefix cache" in README


def test_readme_says_what_the_pictures_and_long_commands_do():
    for claim in ("hollow on a faint dotted line", "a column of panels per variant",
                  "`kvsched plot results/capacity-<name>` draws it again",
                  "a plain line on stderr", "(each PNG's path printed as it is written)"):
        assert claim in README, claim


def test_readme_shows_the_pool60_report_in_a_small_picture():
    """The picture tools/report_screenshot.py draws is in docs/, shown, and stays small."""
    picture = Path(__file__).resolve().parent.parent / "docs" / "report-pool60.png"
    assert "](docs/report-pool60.png)" in README
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size < 150_000
