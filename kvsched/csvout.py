"""Kept for compatibility: this module moved to `kvsched.records.csvout` (the
package of what a run records); old imports keep working."""

from kvsched.records.csvout import *  # noqa: F403
