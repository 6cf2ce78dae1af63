"""report.html in a real browser (headless Chromium, from disk): it renders without console
errors, its timeline and Gantt hold what the records hold, pool60's thrashing is a marked
interval with its preemptions under it. Skipped, saying why, without Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from headless import Browser, chromium_path
from test_report_cli import CLUSTER, SMALL
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.report_view.run_view import read_run

pytestmark = pytest.mark.skipif(chromium_path() is None, reason=(
    "no Chromium on the PATH (apt-get install chromium, or set KVSCHED_CHROMIUM): "
    "report.html is checked in a real browser"))

REPO = Path(__file__).resolve().parent.parent


def run_report(out: Path, scenario: Path, *options: str) -> Path:
    done = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out), "--report",
                                    "--no-check", *options])
    assert done.exit_code == 0, done.output
    return out / scenario.stem / "report.html"


@pytest.fixture(scope="module")
def browser():
    with Browser() as started:
        yield started


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("small")
    (tmp / "small.yaml").write_text(SMALL)
    return run_report(tmp / "r", tmp / "small.yaml", "--record-batches")


@pytest.fixture(scope="module")
def pool60(tmp_path_factory) -> Path:
    return run_report(tmp_path_factory.mktemp("pool60"), REPO / "scenarios" / "pool60.yaml")


def opened(browser, path: Path):
    page = browser.open(path)
    page.wait_for("document.body.dataset.ready === '1'")
    return page


def count(page, selector: str) -> int:
    return page.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")


def test_the_small_report_draws_its_timeline_and_gantt(browser, small):
    page = opened(browser, small)
    assert page.errors == []
    series = page.evaluate("[...document.querySelectorAll('svg.timeline path.series')]"
                           ".map(p => p.dataset.series)")
    assert {"running", "waiting", "used", "free", "tokens", "prefill", "preempted"} <= set(
        series)
    assert page.evaluate("document.querySelector('svg.timeline').dataset.level") == "0"
    # the window is the whole run: every request of the first variant is in the Gantt
    assert count(page, ".gantt .req") == 40
    kinds = set(page.evaluate("[...document.querySelectorAll('.gantt rect.ph')]"
                              ".map(r => r.dataset.kind)"))
    assert {"prefill", "decode"} <= kinds
    assert count(page, "table.summary tr") == 4  # a header and a row per variant
    assert count(page, ".hist svg") == 3


def test_the_tight_variant_shows_its_preemptions_and_recomputes(browser, small):
    page = opened(browser, small)
    page.evaluate("window.kvschedReport.variant(1)")
    view = read_run(small.parent).variant("tight")
    kinds = page.evaluate("[...document.querySelectorAll('.gantt rect.ph')]"
                          ".map(r => r.dataset.kind)")
    assert "preempted" in kinds and "recompute" in kinds
    preempted = page.evaluate("document.querySelector('path.s-preempted').getAttribute('d')")
    assert preempted.count("M") >= 1 and view.summary["num_preemptions"] > 0
    page.evaluate("window.kvschedReport.variant(2)")
    assert "swapped" in page.evaluate("[...document.querySelectorAll('.gantt rect.ph')]"
                                      ".map(r => r.dataset.kind)")
    assert page.errors == []


def test_search_zoom_and_side_by_side(browser, small):
    page = opened(browser, small)
    page.evaluate("window.kvschedReport.search('r17')")
    assert page.evaluate("document.querySelector('.gantt .req').dataset.id") == "r17"
    assert count(page, ".gantt .req.hit") == 1
    window = page.evaluate("[window.kvschedReport.state.x0, window.kvschedReport.state.x1]")
    page.evaluate("window.kvschedReport.zoom(0, 0.5)")
    assert count(page, ".gantt .req") < 40
    page.evaluate("window.kvschedReport.compare(1)")
    assert page.evaluate("[...document.querySelectorAll('.column')].map(c => c.dataset.variant)"
                         ) == ["roomy", "tight"]
    assert count(page, "svg.timeline") == 2
    assert window[0] < window[1]
    assert page.errors == []


def test_pool60_marks_the_thrashing_with_its_preemptions_under_it(browser, pool60):
    page = opened(browser, pool60)
    page.evaluate("window.kvschedReport.variant(1)")  # pool60
    assert page.evaluate("document.querySelector('.column').dataset.variant") == "pool60"
    items = page.evaluate("[...document.querySelectorAll('ul.incidents li')]"
                          ".map(li => li.dataset.kind)")
    assert "thrashing" in items
    bands = count(page, "svg.timeline rect.incident[data-kind=thrashing]")
    assert bands == 4  # one per timeline panel
    page.evaluate(f"window.kvschedReport.showIncident({items.index('thrashing')})")
    band = page.evaluate("(() => { const r = document.querySelector("
                         "'rect.incident.selected[data-kind=thrashing]');"
                         " return [+r.getAttribute('x'), +r.getAttribute('width')]; })()")
    marks = page.evaluate("[...document.querySelectorAll('path.mark')].map(m => "
                          "[m.dataset.request, m.getBBox().x + m.getBBox().width / 2])")
    view = read_run(pool60.parent).variant("pool60")
    assert len(marks) >= 0.9 * view.summary["num_preemptions"]
    assert all(band[0] - 1 <= x <= band[0] + band[1] + 1 for _, x in marks)
    rows = page.evaluate("[...document.querySelectorAll('.gantt .req')].map(g => g.dataset.id)")
    assert {request for request, _ in marks} <= set(rows)
    assert count(page, ".gantt rect.ph-preempted") >= len(rows)
    assert page.errors == []


def test_a_cluster_shows_one_replica_at_a_time(browser, tmp_path):
    (tmp_path / "fleet.yaml").write_text(CLUSTER)
    page = opened(browser, run_report(tmp_path / "r", tmp_path / "fleet.yaml"))
    assert page.evaluate("[...document.querySelectorAll('#replica option')]"
                         ".map(o => o.textContent)") == ["0", "1"]
    view = read_run(tmp_path / "r" / "fleet").variants[0]
    for replica in (0, 1):
        page.evaluate(f"(() => {{ const s = document.getElementById('replica'); "
                      f"s.value = '{replica}'; s.dispatchEvent(new Event('change')); }})()")
        page.evaluate("window.kvschedReport.render()")
        rows = set(page.evaluate("[...document.querySelectorAll('.gantt .req')]"
                                 ".map(g => g.dataset.id)"))
        mine = {rid for rid, r in zip(view.requests["request_id"], view.requests["replica"],
                                      strict=True) if r == replica}
        assert rows == mine
        assert f"(replica {replica})" in page.evaluate("document.querySelector('.column h3')"
                                                       ".textContent")
    assert page.errors == []


def test_a_summary_only_run_still_opens(browser, tmp_path):
    (tmp_path / "small.yaml").write_text(SMALL)
    page = opened(browser, run_report(tmp_path / "r", tmp_path / "small.yaml", "--records",
                                      "summary"))
    assert count(page, "svg.timeline") == 0 and count(page, ".gantt .req") == 40
    assert "no steps.csv" in page.evaluate("document.querySelector('.column').textContent")
    assert page.errors == []


def test_a_trace_loads_in_the_browsers_trace_viewer(browser, small, tmp_path):
    version = browser.call("Browser.getVersion")["product"]
    page = browser.open(small)
    page.goto("chrome://tracing")
    if not page.evaluate("typeof tr !== 'undefined' && !!tr.Model"):
        pytest.skip(f"{version} has no chrome://tracing viewer (Chromium removed it; "
                    "Perfetto's viewer is a web app, out of reach offline): the trace's "
                    "fields are checked in test_report_cli.py")
    out = tmp_path / "t.json"
    done = CliRunner().invoke(app, ["report", str(small.parent), "--trace-out", str(out)])
    assert done.exit_code == 0, done.output
    text = json.dumps(out.read_text(encoding="utf-8"))
    assert page.evaluate(f"(() => {{ const m = new tr.Model(); "
                         f"new tr.importer.Import(m).importTraces([{text}]); "
                         f"return m.getAllProcesses().length; }})()") == 3
