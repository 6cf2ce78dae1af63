"""Kept for compatibility: this module moved to `kvsched.cli.capacity` (the command line's
package); old imports keep working."""

from kvsched.cli.capacity import *  # noqa: F403
