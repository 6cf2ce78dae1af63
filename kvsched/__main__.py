"""`python -m kvsched` and the `kvsched` console script: the command line (`kvsched.cli`)."""

import gc


def main() -> None:
    """Import the command line with the collector paused, then run it: what its imports make
    (typer, pydantic, kvsched's modules) all lives to the end, and a dozen passes over it
    were wasted. `kvsched.cli.main` pauses the collector again at once, for the rest of
    start-up: nothing is made between the two that would start a pass."""
    gc.disable()
    from kvsched.cli import main as command  # (imported here: under the pause)

    gc.enable()
    command()


if __name__ == "__main__":
    main()
