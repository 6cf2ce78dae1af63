"""Kept for compatibility: the hardware catalogues moved to `kvsched.timing.hardware` (the
time models' package); old imports keep working."""

from kvsched.timing.hardware import *  # noqa: F403
