"""The `kvsched` command line: the typer app and what its commands share (`shared`), the
commands (`commands`), `kvsched capacity` (`capacity`) and the heartbeat of long commands
(`progress`).

`app` and `main` are the package's face (`main` is the command, which the console script
`kvsched.__main__:main` runs once it has imported it, and `from kvsched.cli import app` what
the tests run); every other public name of the commands module is handed on too, as before
the package existed. To replace one of the commands' names in a test, set it on
`kvsched.cli.commands`, where the commands read it."""

from kvsched.cli.commands import *  # noqa: F403
from kvsched.cli.commands import app, main

__all__ = ["app", "main"]
