"""The README's picture of the pool60 report: docs/report-pool60.png.

    .venv/bin/python tools/report_screenshot.py [--out docs/report-pool60.png]

Runs scenarios/pool60.yaml with --report (into results/), opens report.html in headless
Chromium (tests/headless.py), picks the pool60 variant and its thrashing incident, and
saves the incidents, the timeline with the thrashing band and its preemption marks, and the
first rows of the Gantt, reduced to a 64-colour palette (about a third of the bytes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from headless import Browser  # noqa: E402

WIDTH = 1200
GANTT_ROWS = 24


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report-pool60.png")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    kvsched = Path(sys.executable).with_name("kvsched")
    subprocess.run([str(kvsched), "run", str(ROOT / "scenarios" / "pool60.yaml"), "--out",
                    str(args.results), "--report"], check=True, stdout=subprocess.DEVNULL)
    with Browser() as browser:
        page = browser.open(args.results / "pool60" / "report.html", WIDTH, 2400)
        page.wait_for("document.body.dataset.ready === '1'")
        page.evaluate("window.kvschedReport.variant(1)")
        kinds = page.evaluate("[...document.querySelectorAll('ul.incidents li')]"
                              ".map(li => li.dataset.kind)")
        page.evaluate(f"window.kvschedReport.showIncident({kinds.index('thrashing')})")
        page.evaluate("window.scrollTo(0, 0)")
        if page.errors:
            raise SystemExit(f"report.html: console errors: {page.errors[:3]}")
        top, bottom = page.evaluate(
            "(() => { const h = [...document.querySelectorAll('h2')][1].getBoundingClientRect();"
            f" const rows = document.querySelectorAll('.gantt .req');"
            f" const last = rows[Math.min(rows.length, {GANTT_ROWS}) - 1].getBoundingClientRect();"
            " return [h.top + scrollY - 4, last.bottom + scrollY + 6]; })()")
        raw = args.out.with_suffix(".raw.png")
        page.screenshot(raw, WIDTH, 2400, clip=(0, top, WIDTH, bottom - top))
    from PIL import Image

    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(
            args.out, optimize=True)
    raw.unlink()
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
