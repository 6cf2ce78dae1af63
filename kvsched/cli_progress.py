"""Kept for compatibility: this module moved to `kvsched.cli.progress` (the command line's
package); old imports keep working."""

from kvsched.cli.progress import *  # noqa: F403
