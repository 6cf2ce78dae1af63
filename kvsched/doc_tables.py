"""The documentation's generated sections, made from the declarations they describe: the
`engine:` key table (the keys and order of `kvsched.schema.EngineSpec`, each default as the
spec declares it and the presets that set another value, from `kvsched.presets.PRESETS`) and
`kvsched presets`' text (`kvsched.presets.describe`).

A generated section stands between `<!-- generated: NAME -->` and `<!-- end: NAME -->`.
The meaning column of the key table is prose: it is carried over by key from the section as
it stands, and a key without one is an error. `tools/doc_tables.py` rewrites the sections;
tests/test_doc_tables.py holds the docs equal to what this module makes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvsched.presets import PRESETS, describe
from kvsched.schema import EngineSpec

_SECTION = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S)
_ROW = re.compile(r"^\| `(?P<key>[a-z_]+)` \| [^|]* \| (?P<meaning>.*) \|$")


def value_text(value: Any) -> str:
    """A value as a scenario file spells it: `true`, `none`, `2048`, `5,000,000`, `0.01`."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, int):
        return f"{value:,}" if value >= 100_000 else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def default_text(key: str) -> str:
    """`key`'s default, and where a preset sets another value: `false (true in `vllm_v1`,
    `sglang`)`; `chunked` marks a value a preset takes only with chunked prefill."""
    default = EngineSpec.model_fields[key].default
    others: dict[str, list[str]] = {}
    for preset in PRESETS.values():
        for settings, tag in ((preset.settings, ""), (preset.when_chunked, "chunked ")):
            if key in settings and settings[key] != default:
                others.setdefault(value_text(settings[key]), []).append(f"{tag}`{preset.name}`")
    text = value_text(default)
    if others:
        text += " (" + "; ".join(f"{value} in {', '.join(names)}"
                                 for value, names in others.items()) + ")"
    return text


def engine_keys(current: str) -> str:
    """The `engine:` key table; `current`: the section as it stands (for the meanings)."""
    meanings = {m["key"]: m["meaning"] for m in map(_ROW.match, current.splitlines()) if m}
    missing = [key for key in EngineSpec.model_fields if key not in meanings]
    if missing:
        raise ValueError(f"engine keys without a meaning in the docs: {', '.join(missing)}")
    unknown = [key for key in meanings if key not in EngineSpec.model_fields]
    if unknown:
        raise ValueError(f"rows for keys the engine does not have: {', '.join(unknown)}")
    rows = [f"| `{key}` | {default_text(key)} | {meanings[key]} |"
            for key in EngineSpec.model_fields]
    return "\n".join(["| key | default | meaning |", "|---|---|---|", *rows]) + "\n"


def presets_text(current: str) -> str:
    """`kvsched presets`' output, as a block of text."""
    return "```text\n" + describe().rstrip("\n") + "\n```\n"


SECTIONS: dict[str, Callable[[str], str]] = {"engine-keys": engine_keys,
                                             "presets": presets_text}
"""Each generated section by name, and what makes it."""


def rewrite(text: str) -> str:
    """`text` with every generated section made again."""
    def again(match: re.Match[str]) -> str:
        make = SECTIONS.get(match["name"])
        if make is None:
            raise ValueError(f"unknown generated section '{match['name']}'")
        return match.group(1) + make(match["body"]) + match.group(4)

    return _SECTION.sub(again, text)
