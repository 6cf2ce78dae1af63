"""Scenario files are read by libyaml when PyYAML has it, and by PyYAML's own parser
otherwise or when libyaml refuses a file: the data, the key lines and the errors must be
the same either way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched import scenario as scenario_module
from kvsched.errors import ScenarioError
from kvsched.scenario import load_scenario, load_scenario_text

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))

needs_libyaml = pytest.mark.skipif(getattr(yaml, "CSafeLoader", None) is None,
                                   reason="this PyYAML has no libyaml")


def _pure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "_FAST_LOADER", None)


def read(text: str, loader_class) -> tuple[object, dict]:
    """(data, key lines) as one loader reads a document."""
    node, data = scenario_module._compose_and_construct(text, "x.yaml", loader_class)
    return data, scenario_module._line_map(node)


@needs_libyaml
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_read_the_same_with_either_parser(path, monkeypatch):
    fast = load_scenario(path)
    _pure(monkeypatch)
    slow = load_scenario(path)
    assert fast.raw == slow.raw
    assert fast.lines == slow.lines
    assert [v.resolved for v in fast.variants] == [v.resolved for v in slow.variants]


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, width=64),
                    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)),
                            max_size=12))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.text("abcxyz_-. ", min_size=1, max_size=6), inner, max_size=4)),
    max_leaves=25)


@needs_libyaml
@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from([None, True, False]), st.integers(2, 6))
def test_random_documents_read_the_same_with_either_parser(data, flow, indent):
    text = yaml.safe_dump({"name": "x", "w": data}, default_flow_style=flow, indent=indent,
                          allow_unicode=True, sort_keys=False)
    assert read(text, yaml.CSafeLoader) == read(text, yaml.SafeLoader)


BAD = [
    "name: x\nengine: {num_blocks: 60\n",          # an unclosed flow mapping
    "name: x\n  engine: 1\n",                        # a bad indent
    "name: x\nengine:\n\t num_blocks: 60\n",        # a tab
    "name: x\nw: *nowhere\n",                        # an unknown alias
    "name: x\nw: \"\\q\"\n",                         # an unknown escape
    "name: x\nw: [1, 2\n",
    "name: x\n---\nname: y\n",                       # two documents
]


@pytest.mark.parametrize("text", BAD)
def test_a_file_libyaml_refuses_gets_pyyaml_s_error(text, tmp_path, monkeypatch):
    with pytest.raises(ScenarioError) as fast:
        load_scenario_text(text, "x.yaml", tmp_path)
    _pure(monkeypatch)
    with pytest.raises(ScenarioError) as slow:
        load_scenario_text(text, "x.yaml", tmp_path)
    assert str(fast.value) == str(slow.value)
    assert "x.yaml" in str(fast.value)


@needs_libyaml
def test_libyaml_reads_the_file_and_pyyaml_only_what_it_refuses(tmp_path, monkeypatch):
    used: list[object] = []
    real = scenario_module._compose_and_construct

    def spy(text, source, loader_class):
        used.append(loader_class)
        return real(text, source, loader_class)

    monkeypatch.setattr(scenario_module, "_compose_and_construct", spy)
    load_scenario_text((ROOT / "scenarios" / "pool60.yaml").read_text(), "x.yaml",
                       tmp_path)
    assert used == [yaml.CSafeLoader]
    used.clear()
    with pytest.raises(ScenarioError):
        load_scenario_text("name: x\nw: [1, 2\n", "x.yaml", tmp_path)
    assert used == [yaml.CSafeLoader, yaml.SafeLoader]
