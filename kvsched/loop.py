"""Kept for compatibility: this module moved to `kvsched.cluster.loop` (the
package of the loops and the cluster); old imports keep working."""

from kvsched.cluster.loop import *  # noqa: F403
