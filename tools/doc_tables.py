"""Write the generated sections of README.md and docs/*.md again from the declarations they
describe (`kvsched.doc_tables`): run it after changing an engine key, a default or a preset.
`--check` only says which files are out of date (exit 1), as tests/test_doc_tables.py does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvsched.doc_tables import rewrite

REPO = Path(__file__).resolve().parent.parent


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args()
    stale = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        made = rewrite(text)
        if made != text:
            stale.append(path.relative_to(REPO).as_posix())
            if not args.check:
                path.write_text(made, encoding="utf-8")
    verb = "out of date" if args.check else "rewritten"
    for name in stale:
        print(f"{name}: {verb}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
