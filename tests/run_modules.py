"""What a `kvsched` command imports: run in a fresh interpreter, it names the modules loaded
(for the tests that hold start-up to what a run needs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def modules_loaded(args: list[str], watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` are imported by `kvsched ARGS` (run through `kvsched.cli.main`
    from the repo, asserting it exits 0)."""
    # (printed at exit: the console script ends the process without returning)
    code = ("import atexit, sys; from kvsched.cli import main\n"
            "atexit.register(lambda: print('loaded:' + ','.join(\n"
            f"    m for m in {watched!r} if m in sys.modules)))\n"
            f"sys.argv = ['kvsched', *{args!r}]\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("loaded:"), done.stdout
    return [name for name in last.removeprefix("loaded:").split(",") if name]
