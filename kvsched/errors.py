"""Input errors: everything a user can get wrong is reported as one line and exit code 2."""

from __future__ import annotations

EXCERPT_CHARS = 60


def one_line(text: str) -> str:
    """`text` with every control character (newline, tab, escape...) shown as an escape, so
    that a message stays one line and cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, escaped excerpt of a user's value or a file's contents, for a message."""
    text = str(value)
    if len(text) <= limit:
        return one_line(text)
    return f"{one_line(text[:limit])}... ({len(text):,} characters)"


class KvschedError(Exception):
    """A problem with the user's input (not a bug): the CLI prints it on one line, exits 2."""


class ScenarioError(KvschedError):
    """A problem in a scenario file or in a value given for it on the command line.

    `source` is the file (or "--set"), `field` the dotted path, `line` the YAML line if known.
    """

    def __init__(self, source: str, message: str, field: str | None = None,
                 line: int | None = None) -> None:
        self.source = source
        self.field = field
        self.line = line
        self.message = message
        super().__init__(str(self))

    def __reduce__(self):  # picklable across sweep worker processes
        return (type(self), (self.source, self.message, self.field, self.line))

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        field = f"{self.field}: " if self.field else ""
        return one_line(f"{where}: {field}{self.message}")
