"""Kept for compatibility: this module moved to `kvsched.records.fastcsv` (the
package of what a run records); old imports keep working."""

from kvsched.records.fastcsv import *  # noqa: F403
