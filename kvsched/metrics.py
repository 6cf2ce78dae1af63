"""Kept for compatibility: this module moved to `kvsched.records.metrics` (the
package of what a run records); old imports keep working."""

from kvsched.records.metrics import *  # noqa: F403
