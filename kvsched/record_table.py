"""Kept for compatibility: this module moved to `kvsched.records.table` (the
package of what a run records); old imports keep working."""

from kvsched.records.table import *  # noqa: F403
