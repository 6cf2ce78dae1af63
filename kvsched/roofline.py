"""Kept for compatibility: this module moved to `kvsched.timing.roofline` (the time models'
package); old imports keep working."""

from kvsched.timing.roofline import *  # noqa: F403
