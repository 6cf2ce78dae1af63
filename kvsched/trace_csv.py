"""Kept for compatibility: this module moved to `kvsched.workload.trace_csv` (the workload
package); old imports keep working."""

from kvsched.workload.trace_csv import *  # noqa: F403
