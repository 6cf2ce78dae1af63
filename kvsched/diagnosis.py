"""Kept for compatibility: this module moved to `kvsched.analysis.diagnosis` (the
package that reads runs); old imports keep working."""

from kvsched.analysis.diagnosis import *  # noqa: F403
