"""Kept for compatibility: this module moved to `kvsched.cli.shared` (the command line's
package); old imports keep working."""

from kvsched.cli.shared import *  # noqa: F403
