"""tools/calibrate.py: the shipped calibration is the fit of the profiles, and meets the bar."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "calibrate.py"
spec = importlib.util.spec_from_file_location("calibrate", TOOL)
assert spec is not None and spec.loader is not None
calibrate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calibrate)
HAVE_PROFILES = (calibrate.DEFAULT_PROFILES / "mlp").is_dir()


def test_without_profiles_it_says_so_and_fits_nothing(tmp_path, capsys):
    assert calibrate.main(["--profiles", str(tmp_path)]) == 0
    assert "no profiles at" in capsys.readouterr().out


@pytest.mark.skipif(not HAVE_PROFILES, reason="../shared/vidur-profiling/ is not here")
def test_the_shipped_calibration_is_the_fit_and_meets_the_accuracy_bar(capsys):
    assert calibrate.main(["--check"]) == 0
    table = [[cell.strip() for cell in line.split("|")[1:-1]]
             for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    rows = [row for row in table if "model not used in fitting" in row[0]]
    assert {row[1] for row in rows} == {"prefill", "decode", "mixed"}
    for _, kind, n, median, p90 in rows:
        assert int(n) >= 100, kind
        assert float(median) <= 10 and float(p90) <= 25, (kind, median, p90)
    # the unseen model's dense layers too: A100 TP 2, H100 TP 2 and TP 4, both regimes
    dense = [row for row in table if "dense layers, not used in fitting" in row[0]]
    assert len(dense) == 6
    for label, kind, n, median, p90 in dense:
        assert int(n) >= 35, (label, kind)
        assert float(median) <= 10 and float(p90) <= 25, (label, kind, median, p90)


def test_a_changed_value_is_reported():
    fitted = {"a100": calibrate.START, "h100": calibrate.START}
    text = calibrate.render(fitted)
    assert calibrate.differences(fitted, text) == []
    changed = text.replace("knee: 2.0", "knee: 3.0", 1)
    assert calibrate.differences(fitted, changed) == ["a100-80gb.knee: shipped 3.0, fitted 2.0"]
