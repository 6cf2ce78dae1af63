"""Kept for compatibility: this module moved to `kvsched.cluster.run` (the
package of the loops and the cluster); old imports keep working."""

from kvsched.cluster.run import *  # noqa: F403
