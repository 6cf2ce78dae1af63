"""The docs stay true to the code: the generated sections equal what the declarations make
(`python tools/doc_tables.py` rewrites them), every page of docs/ is reached from the README,
and every link between the pages lands on a file and a heading that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from kvsched.doc_tables import default_text, engine_keys, rewrite, value_text, values_text
from kvsched.schema import EngineSpec

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(text: str) -> set[str]:
    out, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.add(_anchor(line.lstrip("#")))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_generated_sections_equal_the_declarations(page):
    text = page.read_text(encoding="utf-8")
    assert rewrite(text) == text, f"run: python tools/doc_tables.py ({page.name} is stale)"


def test_the_engine_table_is_in_the_scenario_reference_and_covers_every_key():
    text = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert "<!-- generated: engine-keys -->" in text
    for key in EngineSpec.model_fields:
        assert f"| `{key}` | {default_text(key)} | {values_text(key)} |" in text, key


def test_the_table_is_made_from_the_declarations_not_from_the_page():
    """The section as it stands is not read: a stale or hand-edited table is written anew."""
    stale = ("<!-- generated: engine-keys -->\n| `max_num_seqs` | 1 | x |\n"
             "<!-- end: engine-keys -->")
    made = engine_keys()
    assert rewrite(stale) == f"<!-- generated: engine-keys -->\n{made}<!-- end: engine-keys -->"
    assert ("| `watermark` | 0.01 (0 in `vllm_v1`, `sglang`) | a number >= 0 and < 1 | "
            "admissions leave") in made


def test_values_read_as_a_scenario_spells_them():
    assert [value_text(v) for v in (True, None, 2048, 5_000_000, 0.01, 0.0, "fcfs")] == [
        "true", "none", "2048", "5,000,000", "0.01", "0", "fcfs"]


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert f"](docs/{page.name}" in readme, page.name


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_lands_on_a_file_and_a_heading(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target}"
        if anchor and file.suffix == ".md":
            assert anchor in _headings(file.read_text(encoding="utf-8")), f"{page.name}: {target}"


def test_the_prefix_cache_choices_are_the_caches_the_engine_builds():
    """`engine.prefix_cache` accepts exactly the registry's kinds
    (`kvsched.config.PREFIX_CACHES`, the one line a new cache kind adds), its meaning names
    each with its line, and each line names a class that says how it caches."""
    import importlib

    from kvsched.config import PREFIX_CACHES

    field = EngineSpec.model_fields["prefix_cache"]
    assert get_args(field.annotation) == tuple(PREFIX_CACHES) == ("hashed", "radix")
    for name, (where, summary) in PREFIX_CACHES.items():
        assert f"`{name}` ({summary})" in str(field.description)
        module, _, cls = where.partition(":")
        assert isinstance(getattr(importlib.import_module(module), cls).commits_running, bool)
