"""Kept for compatibility: this module moved to `kvsched.analysis.capacity_grid` (the
package that reads runs); old imports keep working."""

from kvsched.analysis.capacity_grid import *  # noqa: F403
