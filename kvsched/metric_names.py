"""Kept for compatibility: this module moved to `kvsched.records.metric_names` (the
package of what a run records); old imports keep working."""

from kvsched.records.metric_names import *  # noqa: F403
