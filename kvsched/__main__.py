"""`python -m kvsched` is the `kvsched` command."""

from kvsched.cli import main

main()
