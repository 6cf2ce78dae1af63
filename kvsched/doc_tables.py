"""The engine keys' reference and the documentation's generated sections, made from the one
declaration of each key (`kvsched.config.EngineConfig`'s knobs, through
`kvsched.schema.EngineSpec`): the `engine:` key table (each key's default, the presets that set
another value, from `kvsched.presets.PRESETS`, the values it takes and what it means), `kvsched
keys`' text, and `kvsched presets`' text (`kvsched.presets.describe`).

A generated section stands between `<!-- generated: NAME -->` and `<!-- end: NAME -->`.
`tools/doc_tables.py` rewrites the sections; tests/test_doc_tables.py holds the docs equal to
what this module makes."""

from __future__ import annotations

import re
import textwrap
import types
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from kvsched.config import shown
from kvsched.presets import PRESETS, describe
from kvsched.schema import EngineSpec

_SECTION = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S)
_LINK = re.compile(r"\[([^]]+)\]\(([a-z_-]+\.md)(#[^)]*)?\)")
_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


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


def values_text(key: str) -> str:
    """The values `key` takes: its choices, `true, false`, or a number's bounds."""
    info = EngineSpec.model_fields[key]
    extra = info.json_schema_extra
    also = extra.get("also") if isinstance(extra, dict) else None
    return _values(info.annotation, info.metadata) + (f" or {also}" if also else "")


def _values(kind: Any, constraints: Iterable[Any]) -> str:
    origin = get_origin(kind)
    if origin is Literal:
        return ", ".join(map(str, get_args(kind)))
    if origin is Annotated:
        inner, *more = get_args(kind)
        return _values(inner, [c for m in more for c in getattr(m, "metadata", [m])])
    if origin in (Union, types.UnionType):
        members = [m for m in get_args(kind) if m is not type(None)]
        return " or ".join(_values(m, constraints) for m in members) + " or none"
    if kind is bool:
        return "true, false"
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return "a mapping {" + ", ".join(kind.model_fields) + "}"
    bounds = [f"{op} {shown(getattr(c, name))}" for c in constraints
              for name, op in _BOUNDS if getattr(c, name, None) is not None]
    noun = "an integer" if kind is int else "a number"
    return noun + (" " + " and ".join(bounds) if bounds else "")


def engine_keys() -> str:
    """The `engine:` key table, in markdown."""
    rows = [f"| `{key}` | {default_text(key)} | {values_text(key)} | "
            f"{EngineSpec.model_fields[key].description} |" for key in EngineSpec.model_fields]
    return "\n".join(["| key | default | values | meaning |", "|---|---|---|---|", *rows]) + "\n"


def keys_text(keys: Iterable[str] = ()) -> str:
    """`kvsched keys`: each engine key (or those of `keys`) with its default, the values it
    takes and what it means, for a terminal (links as their text and page)."""
    out = []
    for key in list(keys) or list(EngineSpec.model_fields):
        meaning = _LINK.sub(lambda m: f"{m[1]} (docs/{m[2]})",
                            str(EngineSpec.model_fields[key].description).replace("`", ""))
        out += [f"{key}: {default_text(key).replace('`', '')}",
                textwrap.fill(f"values: {values_text(key)}", 92, initial_indent="  ",
                              subsequent_indent="    "),
                textwrap.fill(meaning, 92, initial_indent="  ", subsequent_indent="  "), ""]
    return "\n".join(out)


def presets_text() -> str:
    """`kvsched presets`' output, as a block of text."""
    return "```text\n" + describe().rstrip("\n") + "\n```\n"


SECTIONS: dict[str, Callable[[], str]] = {"engine-keys": engine_keys,
                                          "presets": presets_text}
"""Each generated section by name, and what makes it (from the declarations alone: the
section as it stands on the page is not read)."""


def rewrite(text: str) -> str:
    """`text` with every generated section made again."""
    def again(match: re.Match[str]) -> str:
        make = SECTIONS.get(match["name"])
        if make is None:
            raise ValueError(f"unknown generated section '{match['name']}'")
        return match.group(1) + make() + match.group(4)

    return _SECTION.sub(again, text)
