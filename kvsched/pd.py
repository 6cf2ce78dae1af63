"""Kept for compatibility: this module moved to `kvsched.cluster.pd` (the
package of the loops and the cluster); old imports keep working."""

from kvsched.cluster.pd import *  # noqa: F403
