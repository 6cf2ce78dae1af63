"""Scenario files are read in two passes of PyYAML's parser (the shape check's events, then
one compose whose nodes give both the key lines and the data) where three were made: the
data, the lines and the errors must be what `yaml.compose` and `yaml.safe_load` gave."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched import scenario as scenario_module
from kvsched.errors import ScenarioError
from kvsched.scenario import load_scenario_text

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))


def three_passes(text: str) -> tuple[object, object]:
    """(key lines or the duplicate, data) as the loader read them before: the shape check,
    `yaml.compose` and `yaml.safe_load`, each its own pass."""
    scenario_module._check_shape(text, "x.yaml")
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    data = yaml.safe_load(text)
    try:
        lines: object = scenario_module._line_map(node)
    except scenario_module.DuplicateKey as dup:
        lines = (dup.field, dup.line)
    return lines, data


def two_passes(text: str) -> tuple[object, object]:
    lines, data = scenario_module._read_yaml(text, "x.yaml")
    if isinstance(lines, scenario_module.DuplicateKey):
        lines = (lines.field, lines.line)
    return lines, data


def outcome(read, text: str) -> tuple[str, object]:
    try:
        return "read", read(text)
    except yaml.YAMLError as exc:
        return type(exc).__name__, str(exc)
    except ScenarioError as exc:
        return "ScenarioError", str(exc)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_read_as_before(path):
    text = path.read_text()
    assert two_passes(text) == three_passes(text)


MERGED = """\
name: x
base: &base {num_blocks: 60, block_size: 16}
engine:
  <<: *base
  num_blocks: 120
"""


def test_merge_keys_are_not_duplicates_and_keep_their_lines():
    """Making the data flattens `<<` into its mapping: the lines are read before that."""
    lines, data = two_passes(MERGED)
    assert data["engine"] == {"num_blocks": 120, "block_size": 16}
    assert lines[("engine", "num_blocks")] == 5 and lines[("engine", "<<")] == 4
    assert (lines, data) == three_passes(MERGED)


ODD = [
    MERGED,
    "name: x\nengine: {num_blocks: 60\n",           # an unclosed flow mapping
    "name: x\n  engine: 1\n",                         # a bad indent
    "name: x\nseed:\t0\n",                            # a tab as spacing
    "name: x\nengine: {preemption: recompute?}\n",    # a '?' in a flow scalar
    "name: x\nvariants: !\n",                         # a bare tag
    "name: x\nd: |#c\n  text\n",                      # a block scalar's header and a '#'
    "name: x\ntime: {\n\ufeffkind: steps}\n",          # a BOM inside a flow mapping
    "name: x\nw: *nowhere\n",                         # an unknown alias
    "name: x\nw: \"\\q\"\n",                          # an unknown escape
    "name: x\n---\nname: y\n",                        # two documents
    "name: x\nname: y\n",                             # a duplicate key
    "name: x\na: 1\na: 2\n? [1, 2]\n: 3\n",           # a duplicate and an unhashable key
    "",                                                 # nothing
]


@pytest.mark.parametrize("text", ODD)
def test_odd_and_broken_files_read_or_fail_as_before(text):
    assert outcome(two_passes, text) == outcome(three_passes, text)


def test_a_yaml_error_is_reported_before_a_duplicate_key(tmp_path):
    with pytest.raises(ScenarioError, match="YAML syntax error"):
        load_scenario_text("name: x\na: 1\na: 2\n? [1, 2]\n: 3\n", "x.yaml", tmp_path)
    with pytest.raises(ScenarioError, match=r"x\.yaml:2: .*duplicate key"):
        load_scenario_text("name: x\nname: y\n", "x.yaml", tmp_path)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, width=64),
                    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)),
                            max_size=12))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.text("abcxyz_-. ", min_size=1, max_size=6), inner, max_size=4)),
    max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(documents, st.sampled_from([None, True, False]), st.integers(2, 6),
       st.lists(st.sampled_from(["\t", "?", "!", "&a ", "*a", "<<: ", "\ufeff", "|", "#", ":",
                                 " ", "\n", "-", "{", "}", "[", "]", ","]), max_size=4),
       st.integers(0, 10**6))
def test_random_documents_read_or_fail_as_before(data, flow, indent, bits, at):
    text = yaml.safe_dump({"name": "x", "w": data}, default_flow_style=flow, indent=indent,
                          allow_unicode=True, sort_keys=False)
    for bit in bits:  # bent a little: odd characters anywhere
        i = at % (len(text) + 1)
        text = text[:i] + bit + text[i:]
        at = at * 31 + 7
    assert outcome(two_passes, text) == outcome(three_passes, text)


def test_a_text_loaded_again_is_parsed_once_and_copied(monkeypatch):
    """A sweep loads its scenario once per grid point: the same text is parsed once, each
    load gets its own copy of the data, and a text that fails fails every time."""
    calls = []
    parse = scenario_module._read_yaml
    monkeypatch.setattr(scenario_module, "_read_yaml",
                        lambda text, source: calls.append(text) or parse(text, source))
    scenario_module._read_yaml_kept.cache_clear()
    text = (ROOT / "scenarios" / "budget128.yaml").read_text(encoding="utf-8")
    first = load_scenario_text(text, "b.yaml", ROOT, ["engine.num_blocks=100"])
    second = load_scenario_text(text, "b.yaml", ROOT, ["engine.num_blocks=200"])
    assert len(calls) == 1
    assert first.raw == second.raw and first.raw is not second.raw
    first.raw["variants"][0]["name"] = "changed"
    assert load_scenario_text(text, "b.yaml", ROOT).raw["variants"][0]["name"] == "budget2048"
    assert [v.spec.engine.num_blocks for v in (first.variants[0], second.variants[0])] == \
        [100, 200]
    for _ in range(2):
        with pytest.raises(ScenarioError, match="YAML syntax error"):
            load_scenario_text("name: [", "bad.yaml", ROOT)
    assert calls.count("name: [") == 2
