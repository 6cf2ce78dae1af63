"""Kept for compatibility: this module moved to `kvsched.cluster.transfer` (the
package of the loops and the cluster); old imports keep working."""

from kvsched.cluster.transfer import *  # noqa: F403
