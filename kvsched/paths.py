"""Names that become paths: a scenario's name is a folder under `--out`, a variant's a folder
under it, a sweep's `--name` the folder `sweep-<name>`, a capacity search's `capacity-<name>`.
Each must be one plain path component that cannot reach outside its parent or land on a file
a run writes. A results folder already there is replaced only when kvsched wrote it (its
marker file is in it); a single output file (`step-time --out`) is written whole or not at
all."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

from kvsched.errors import KvschedError, excerpt

MAX_NAME_CHARS = 100
RESULT_SUFFIXES = (".csv", ".json", ".png", ".yaml")
"""Files a run writes beside the variant folders (summary.csv, ttft.png...) end so."""
_COMPONENT = re.compile(r"[A-Za-z0-9_.-]+")


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a results folder, or None if it can."""
    if not _COMPONENT.fullmatch(name):
        return f"expected letters, digits, '_', '-' or '.', got '{excerpt(name)}'"
    if len(name) > MAX_NAME_CHARS:
        return f"expected at most {MAX_NAME_CHARS} characters, got {len(name)}"
    if name.startswith("."):
        return (f"'{name}' starts with '.': such names are hidden and kvsched stages its "
                "results in '.<name>.*' folders")
    if name.lower().endswith(RESULT_SUFFIXES):
        return (f"'{name}' ends like a file a run writes ({', '.join(RESULT_SUFFIXES)}): "
                "it would collide with summary.csv, run.json, ttft.png...")
    return None


def check_name(name: str | None, option: str = "--name") -> None:
    """Refuse, in one line, a folder name given on the command line (`sweep --name`,
    `capacity --name`) that `name_problem` rejects."""
    if name is not None and (problem := name_problem(name)):
        raise KvschedError(f"{option}: {problem}")


def scenario_name_problem(name: str) -> str | None:
    """A scenario's name also must not look like a sweep's folder (`sweep-<name>`)."""
    problem = name_problem(name)
    if problem is None and name.startswith("sweep-"):
        return f"'{name}' starts with 'sweep-', which names a sweep's results folder"
    return problem


def out_problem(out: Path) -> str | None:
    """Why `--out` cannot hold results (a file, under a file, not writable), or None."""
    probe = out
    while not probe.exists() and probe != probe.parent and not probe.is_symlink():
        probe = probe.parent
    if probe.is_symlink() and not probe.exists():
        return f"{probe} is a broken symbolic link"
    if not probe.is_dir():
        where = "is" if probe == out else f"is under {probe}, which is"
        return f"{out} {where} a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _reason(exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        reason += " (disk full)"
    return reason


def write_error(folder: Path, exc: OSError) -> KvschedError:
    """An OS error while writing results, as one line (the disk is full, a folder is
    read-only...): nothing partial is left behind by the writers."""
    return KvschedError(f"cannot write results to {folder}/: {_reason(exc)}; nothing was written")


def write_file(path: Path, text: str | Iterable[str], option: str = "--out") -> None:
    """Write `path` whole or not at all (`text`, or its pieces one after the other): into a
    temporary file in its folder, then renamed over it; on an OS error (disk full, no such
    folder...) nothing is left and the error is one line naming `option`."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise KvschedError(f"{option}: cannot write {path}: {_reason(exc)}; "
                           "nothing was written") from None
    finally:
        if tmp is not None:
            with suppress(OSError):
                os.unlink(tmp)


# -- replacing only what kvsched wrote -------------------------------------------------


class Results(NamedTuple):
    """A kind of results folder under `--out`: what writes it, the file (a glob under the
    folder) that marks one kvsched wrote, and how the user picks another folder."""

    what: str
    marker: str
    shown: str  # the marker as the user reads it
    elsewhere: str


RUN = Results("a run", "*/run.json", "<variant>/run.json", "give another --out or --set name=NEW")
SWEEP = Results("a sweep", "sweep.json", "sweep.json", "give another --out or --name")
CAPACITY = Results("a capacity search", "capacity.json", "capacity.json",
                   "give another --out or --name")


def _marked(folder: Path, kind: Results) -> bool:
    try:
        return any(path.is_file() for path in folder.glob(kind.marker))
    except OSError:
        return False


def check_replaceable(folder: Path, kind: Results) -> None:
    """Refuse, in one line, to replace `folder` unless it is absent or is a folder kvsched
    wrote for `kind` (its marker file is in it): a user's file, symbolic link or folder
    there is left as it is."""
    if folder.is_symlink():
        what = "a symbolic link"
    elif not folder.exists():
        return
    elif not folder.is_dir():
        what = "a file"
    elif _marked(folder, kind):
        return
    else:
        what = "a folder"
    raise KvschedError(f"--out: {folder} is {what} kvsched did not write (the results of "
                       f"{kind.what} hold {kind.shown}); it is left as it is: "
                       f"{kind.elsewhere}")


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while results are renamed into place: a signal between moving
    the old folder aside and moving the new one in would lose both. It arrives just after."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def replace_dir(staging: Path, final: Path, kind: Results) -> None:
    """Put the finished `staging` folder in the place of `final` (which may not exist, or
    be a folder kvsched wrote for `kind`: see `check_replaceable`), the previous `final`
    removed only once the new one is in place."""
    check_replaceable(final, kind)
    if not final.exists():
        os.replace(staging, final)
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    try:
        with signals_held():
            os.replace(final, old)
            try:
                os.replace(staging, final)
            except OSError:
                os.replace(old, final)  # put the previous results back
                raise
    finally:  # also when a held signal is delivered on leaving the block
        shutil.rmtree(old, ignore_errors=True)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object, or one line naming the file."""
    if not path.is_file():
        raise KvschedError(f"{path}: missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KvschedError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise KvschedError(f"{path}: expected a JSON object")
    return data
