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
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, TypeVar

from kvsched.errors import KvschedError, excerpt

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


REACH_TIMEOUT = 3.0
"""Seconds a Ray cluster's address has to accept a TCP connection (Ray itself retries an
address where nothing answers for minutes)."""

GCS_TIMEOUT = 2
"""Seconds the head's GCS has to accept the handshake of a Ray client, and again to answer
its first request: a port that accepts connections but is not a Ray head's is told apart in
about five seconds (Ray's own first attempt waits longer than a minute)."""

_GCS_PROBE = """\
import os, sys
os.environ["RAY_gcs_rpc_server_connect_timeout_s"] = sys.argv[2]
try:
    from ray._raylet import InnerGcsClient
except ImportError:  # a Ray without it: ray.init alone will tell
    sys.exit(3)
try:
    InnerGcsClient.standalone(sys.argv[1], None, int(sys.argv[2]) * 1000)
except Exception as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
"""
"""Run in its own process, which a hard timeout can end: the GCS client's connection waits
in C++ code that no signal interrupts."""


def check_address(address: str | None, timeout: float = REACH_TIMEOUT) -> None:
    """Refuse, in one line and within seconds, a Ray address (`--address`, else
    $RAY_ADDRESS) where no Ray cluster answers: HOST:PORT must accept a TCP connection
    within `timeout` seconds and, unless it is a Ray Client address (ray://), answer a GCS
    client's handshake as a Ray head does. `auto`, `local` and no address are Ray's to
    resolve (they fail at once when there is no cluster)."""
    given = address if address is not None else os.environ.get("RAY_ADDRESS") or None
    if given is None or given.strip() in ("auto", "local"):
        return
    option = "--address" if address is not None else "RAY_ADDRESS"
    given = given.strip()
    host, sep, port = given.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 address in brackets
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise KvschedError(f"{option}: expected HOST:PORT, ray://HOST:PORT or auto, got "
                           f"'{given}'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise KvschedError(f"{option}: cannot reach a Ray cluster at {given}: {reason} "
                           f"(waited {timeout:g} s); is it up, and is the port its "
                           "GCS port (6379) or, with ray://, its client port (10001)?") from None
    if not given.startswith("ray://"):
        _check_gcs(f"{host}:{port}", given, option)


def _check_gcs(where: str, given: str, option: str) -> None:
    """Refuse an address whose port is open but answers no Ray client (another service)."""
    limit = 4 * GCS_TIMEOUT + 10  # Ray's import and the client's three waits, and a margin
    try:
        done = subprocess.run([sys.executable, "-c", _GCS_PROBE, where, str(GCS_TIMEOUT)],
                              capture_output=True, text=True, timeout=limit,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        reason = f"no reply within {limit} s"
    else:
        last = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = last[-1] if last else f"exit {done.returncode}"
        if done.returncode in (0, 3) or "timed out" not in reason.lower():
            return  # a Ray head answered, if only to refuse (a token...): ray.init will say
    raise KvschedError(f"{option}: {given} accepts connections but does not answer as a Ray "
                       f"cluster's head ({reason}); give the head's GCS port (6379 unless "
                       "`ray start --head --port` set another)")


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _run_ray(function: Callable[[J], R], jobs: Sequence[J], address: str | None,
             on_done: Callable[[], None] | None) -> list[R]:
    # ray is optional: only the Ray backend imports it
    try:
        import ray
    except ImportError:
        raise KvschedError(RAY_MISSING) from None
    started_here = not ray.is_initialized()
    if started_here:
        check_address(address)
        try:
            # No dashboard, no usage report: nothing reaches the network but the cluster.
            with _connecting(address):
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = address or "a local Ray"
            raise KvschedError(f"--backend ray: cannot start or reach {where}: "
                               f"{_first_and_last(exc)}") from None
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


CONNECT_TRIES = 3
"""Seconds (one try a second) Ray spends on a cluster's address that answers but is not a
Ray cluster's; Ray's own default is 20 (`RAY_gcs_server_port_wait_time_s`, kept if set)."""


@contextmanager
def _connecting(address: str | None) -> Iterator[None]:
    """While `ray.init` connects to `address`: at most CONNECT_TRIES tries, and Ray's
    warning a second on stderr held back; shown if the connection is made, dropped when
    it fails (the caller's one line says why). Starting a local Ray is left alone."""
    if address is None:
        yield
        return
    wait = "RAY_gcs_server_port_wait_time_s"
    given = os.environ.get(wait)
    os.environ.setdefault(wait, str(CONNECT_TRIES))
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)  # Ray's C++ logs write to the descriptor, not sys.stderr
        connected = False
        try:
            yield
            connected = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if given is None:
                os.environ.pop(wait, None)
            if connected:
                held.seek(0)
                sys.stderr.write(held.read().decode("utf-8", "replace"))


def _first_and_last(exc: BaseException) -> str:
    """Ray's error in a line: its first line, and the last line of what caused it (the
    gRPC reply that says why, under `Failed to connect to Ray cluster`)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    cause = [line.strip() for line in str(exc.__cause__ or "").splitlines() if line.strip()]
    return first + (f" ({excerpt(cause[-1], 200)})" if cause else "")


def _call(function: Callable[[J], R], job: J) -> R:
    return function(job)
