"""capacity.png: a title naming the SLOs, units on both axes, the SLO line and the answer
labelled, plain rate ticks, a column of panels per search when their rates overlap; and
`kvsched plot <out>/capacity-<name>` draws it again from the folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_capacity import SMALL
from test_plots import assert_sensible_png, invoke

from kvsched.plots.capacity import draw_capacity, overlapping, read_capacity, search_frames

POOL60 = Path(__file__).resolve().parent.parent / "scenarios" / "pool60.yaml"


@pytest.fixture(scope="module")
def overlaid(tmp_path_factory) -> Path:
    """pool60 and pool60_swap: the same rates, answers within a few percent."""
    out = tmp_path_factory.mktemp("cap")
    result = invoke("capacity", POOL60, "--slo", "ttft_p99=2", "--slo", "p99_e2el_ms=30000",
                    "--variant", "pool60", "--variant", "pool60_swap", "--tolerance", "0.05",
                    "--plot", "--out", out, "--name", "both")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == \
        f"wrote {out / 'capacity-both' / 'capacity.png'}"
    return out / "capacity-both"


def figure_of(folder: Path):
    info, answers, probes = read_capacity(folder)
    return draw_capacity(answers, probes, info["slo"], info["tolerance"], info.get("time_unit"),
                         folder.name, [a["path"] for a in info["axes"]]), answers, info


def visible(figure):
    return [ax for ax in figure.axes if ax.axison]


def test_title_units_slo_and_answer_are_on_the_picture(overlaid):
    assert_sensible_png(overlaid / "capacity.png")
    figure, answers, info = figure_of(overlaid)
    assert info["time_unit"] == "s"
    assert info["slo"][1] == {"metric": "e2e_p99", "limit": 30.0, "written": "p99_e2el_ms"}
    title = figure.get_suptitle()
    assert "ttft_p99 <= 2 s and e2e_p99 <= 30 s (p99_e2el_ms)" in title
    assert "no request starved" in title and "5% above it fails" in title
    panels = visible(figure)
    assert [ax.get_ylabel() for ax in panels] == ["ttft_p99 (s)", "ttft_p99 (s)",
                                                  "e2e_p99 (s)", "e2e_p99 (s)"]
    for ax, limit in zip(panels, (2.0, 2.0, 30.0, 30.0), strict=True):
        assert ax.get_xlabel() == "request rate (requests/s, log scale)"
        slo = [line for line in ax.get_lines() if line.get_gid() == "slo"]
        assert [float(line.get_ydata()[0]) for line in slo] == [limit]
        assert any(t.get_gid() == "slo-label" and t.get_text().startswith("SLO ")
                   for t in ax.texts)
    for ax, (_, answer) in zip(panels[:2], answers.iterrows(), strict=True):
        ring = next(line for line in ax.get_lines() if line.get_gid() == "answer")
        assert float(ring.get_xdata()[0]) == pytest.approx(answer["rate"])
        assert float(ring.get_ydata()[0]) == pytest.approx(answer["ttft_p99"])
        label = next(t.get_text() for t in ax.texts if t.get_gid() == "capacity")
        assert label.startswith(f"capacity {answer['rate']:.3g} requests/s")


def test_overlapping_searches_get_a_column_each(overlaid):
    """Two variants over the same rates: one column of panels (one per SLO) each, titled
    by the variant; searches far apart share one panel per SLO."""
    figure, answers, info = figure_of(overlaid)
    panels = visible(figure)
    assert [ax.get_title() for ax in panels[:2]] == ["pool60", "pool60_swap"]
    _, answers, probes = read_capacity(overlaid)
    assert overlapping(search_frames(answers, probes, []))
    apart = probes.copy()
    apart.loc[apart["variant"] == "pool60_swap", "rate"] *= 1000
    searches = search_frames(answers, apart, [])
    assert not overlapping(searches)
    single = draw_capacity(answers, apart, info["slo"], info["tolerance"], "s", "t")
    assert len(visible(single)) == 2  # one panel per SLO, both searches in it


def test_rate_ticks_are_plain_numbers(overlaid):
    figure, _, _ = figure_of(overlaid)
    figure.canvas.draw()
    for ax in visible(figure):
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert labels and all("^" not in label and "times" not in label for label in labels)
        assert not [t for t in ax.xaxis.get_minorticklabels() if t.get_text()]


def test_plot_redraws_capacity_png_from_the_folder(overlaid):
    """`kvsched plot results/capacity-<name>` writes the same picture `--plot` did."""
    drawn = (overlaid / "capacity.png").read_bytes()
    (overlaid / "capacity.png").unlink()
    result = invoke("plot", overlaid)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {overlaid / 'capacity.png'}"
    assert (overlaid / "capacity.png").read_bytes() == drawn


def test_a_grid_search_is_named_by_its_point(tmp_path):
    (tmp_path / "s.yaml").write_text(SMALL)
    result = invoke("capacity", tmp_path / "s.yaml", "--slo", "ttft_p99=0.5", "--variant",
                    "a", "--blocks", "200,400", "--tolerance", "0.1", "--plot", "--out",
                    tmp_path)
    assert result.exit_code == 0, result.output
    figure, _, _ = figure_of(tmp_path / "capacity-small")
    titles = {ax.get_title() for ax in visible(figure)}
    labels = {t.get_text() for t in figure.legends[0].get_texts()}
    assert {"a num_blocks=200", "a num_blocks=400"} <= titles | labels


def test_plot_of_a_capacity_folder_with_a_missing_file_is_one_line(overlaid, tmp_path):
    broken = tmp_path / "capacity-broken"
    broken.mkdir()
    (broken / "capacity.json").write_text((overlaid / "capacity.json").read_text())
    (broken / "capacity.csv").write_text((overlaid / "capacity.csv").read_text())
    result = invoke("plot", broken)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {broken / 'capacity_probes.csv'}: missing"
    info = json.loads((overlaid / "capacity.json").read_text())
    info["slo"] = "ttft_p99"
    (broken / "capacity.json").write_text(json.dumps(info))
    result = invoke("plot", broken)
    assert result.exit_code == 2 and "no usable field 'slo'" in result.stderr


def test_a_folder_from_before_time_units_still_draws(overlaid, tmp_path):
    """capacity.json without `time_unit` (written before it was recorded): drawn, the rate
    in requests per time unit."""
    old = tmp_path / "capacity-old"
    old.mkdir()
    for name in ("capacity.csv", "capacity_probes.csv"):
        (old / name).write_text((overlaid / name).read_text())
    info = json.loads((overlaid / "capacity.json").read_text())
    del info["time_unit"]
    info["slo"] = [{"metric": t["metric"], "limit": t["limit"]} for t in info["slo"]]
    (old / "capacity.json").write_text(json.dumps(info))
    assert invoke("plot", old).exit_code == 0
    figure, _, _ = figure_of(old)
    assert visible(figure)[0].get_xlabel() == \
        "request rate (requests per time unit, log scale)"
    assert isinstance(pd.read_csv(old / "capacity.csv"), pd.DataFrame)
