"""Kept for compatibility: this module moved to `kvsched.timing.stepfit` (the time models'
package); old imports keep working."""

from kvsched.timing.stepfit import *  # noqa: F403
