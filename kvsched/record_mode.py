"""Kept for compatibility: this module moved to `kvsched.records.mode` (the
package of what a run records); old imports keep working."""

from kvsched.records.mode import *  # noqa: F403
