"""Kept for compatibility: this module moved to `kvsched.timing.kvpool` (the time models'
package); old imports keep working."""

from kvsched.timing.kvpool import *  # noqa: F403
