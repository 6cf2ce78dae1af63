"""Kept for compatibility: this module moved to `kvsched.workload.trace_notes` (the workload
package); old imports keep working."""

from kvsched.workload.trace_notes import *  # noqa: F403
