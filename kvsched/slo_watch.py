"""Kept for compatibility: this module moved to `kvsched.analysis.slo_watch` (the
package that reads runs); old imports keep working."""

from kvsched.analysis.slo_watch import *  # noqa: F403
