"""An `EngineConfig` from a preset and `engine:` keys, read as a scenario's `engine:` is (the
schema's aliases, checks and the preset's settings): for tests, the conformance drivers and
library callers."""

from __future__ import annotations

from typing import Any

from kvsched.config import EngineConfig
from kvsched.presets import PRESETS
from kvsched.schema import EngineSpec


def engine_config(preset: str = "lesson", **keys: Any) -> EngineConfig:
    """The `EngineConfig` of `preset` with `keys` (scenario `engine:` keys) on top."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset '{preset}'; known: {', '.join(PRESETS)}")
    return EngineSpec.model_validate({"preset": preset, **keys}).to_config()
