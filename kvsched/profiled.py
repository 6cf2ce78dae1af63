"""Kept for compatibility: this module moved to `kvsched.timing.profiled` (the time models'
package); old imports keep working."""

from kvsched.timing.profiled import *  # noqa: F403
