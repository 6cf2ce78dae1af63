"""Kept for compatibility: this module moved to `kvsched.timing.serve_defaults` (the time models'
package); old imports keep working."""

from kvsched.timing.serve_defaults import *  # noqa: F403
