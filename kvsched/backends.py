"""Where the independent jobs of a sweep or a capacity search run: here (one process, or
`jobs` processes) or as Ray tasks (a local Ray by default, a cluster's with `address`).

Every backend returns the results in the order of the jobs, whatever order they finish
in, so a grid's records do not depend on where it ran.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from enum import StrEnum
from typing import Any, TypeVar

from kvsched.errors import KvschedError

J = TypeVar("J")
R = TypeVar("R")

_PR_SET_PDEATHSIG = 1

RAY_MISSING = ("--backend ray needs Ray, which is not installed: pip install 'kvsched[ray]' "
               "(or use --backend local)")


class Backend(StrEnum):
    LOCAL = "local"  # this machine: -j processes
    RAY = "ray"  # Ray tasks


def run_jobs(function: Callable[[J], R], jobs: Sequence[J], backend: Backend = Backend.LOCAL,
             workers: int = 1, address: str | None = None,
             on_done: Callable[[], None] | None = None) -> list[R]:
    """`function` over `jobs` (picklable, module-level), results in job order; `on_done`
    after each result (progress bars)."""
    if backend is Backend.RAY:
        return _run_ray(function, jobs, address, on_done)
    if address is not None:
        raise KvschedError("--address needs --backend ray")
    results: list[R] = []
    if workers > 1 and len(jobs) > 1:
        pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                                   initializer=_die_with_parent)
        try:
            for result in pool.map(function, jobs, chunksize=1):
                results.append(result)
                if on_done:
                    on_done()
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown()
        return results
    for job in jobs:
        results.append(function(job))
        if on_done:
            on_done()
    return results


def process_pool(workers: int) -> ProcessPoolExecutor:
    """`workers` processes that die with the parent, for jobs handed out one by one."""
    return ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now (the parent failed or was interrupted)."""
    _stop(pool)


def _die_with_parent() -> None:
    """In a worker: receive SIGTERM when the parent process dies, however it dies (Linux)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the parent's _stop still ends them
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the workers now (an error, Ctrl-C or SIGTERM in the parent), not after their
    current points."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _run_ray(function: Callable[[J], R], jobs: Sequence[J], address: str | None,
             on_done: Callable[[], None] | None) -> list[R]:
    try:
        import ray
    except ImportError:
        raise KvschedError(RAY_MISSING) from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            # No dashboard, no usage report: nothing reaches the network but the cluster.
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = address or "a local Ray"
            raise KvschedError(f"--backend ray: cannot start or reach {where}: "
                               f"{str(exc).splitlines()[0] if str(exc) else exc}") from None
    try:
        remote: Any = ray.remote(_call)
        refs = [remote.remote(function, job) for job in jobs]
        results: list[Any] = []
        for ref in refs:  # in job order: the same records as -j 1
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:  # a task's own error, not Ray's
                cause = exc.cause if isinstance(exc.cause, Exception) else None
                if isinstance(cause, KvschedError):
                    raise KvschedError(str(cause)) from None
                raise
            if on_done:
                on_done()
        return results
    finally:
        if started_here and address is None:
            ray.shutdown()


def _call(function: Callable[[J], R], job: J) -> R:
    return function(job)
