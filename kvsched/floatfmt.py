"""Kept for compatibility: this module moved to `kvsched.records.floatfmt` (the
package of what a run records); old imports keep working."""

from kvsched.records.floatfmt import *  # noqa: F403
