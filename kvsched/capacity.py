"""Kept for compatibility: this module moved to `kvsched.analysis.capacity` (the
package that reads runs); old imports keep working."""

from kvsched.analysis.capacity import *  # noqa: F403
