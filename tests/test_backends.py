"""Backends: a sweep and a capacity search give the same rows here, in processes, on Ray."""

from __future__ import annotations

import sys

import pytest
from test_capacity import ROOT, SMALL
from typer.testing import CliRunner

from kvsched.analysis.capacity import SloTarget, capacity_frame, run_capacity
from kvsched.analysis.sweep import SweepSource, parse_axis, run_sweep
from kvsched.backends import Backend, run_jobs
from kvsched.cli import app
from kvsched.errors import KvschedError

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray started by the test itself (two workers, no dashboard)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def source() -> SweepSource:
    return SweepSource(SMALL, "small.yaml", ROOT)


def test_every_backend_returns_results_in_job_order(local_ray):
    done = []
    jobs = [-3, 1, -4, 1, -5, 9, -2]  # abs: a function Ray's workers can import
    expected = [abs(x) for x in jobs]
    assert run_jobs(abs, jobs) == expected
    assert run_jobs(abs, jobs, workers=2) == expected
    assert run_jobs(abs, jobs, Backend.RAY, on_done=lambda: done.append(1)) == expected
    assert len(done) == 7


def test_a_sweep_on_ray_is_the_sweep_with_j1(local_ray):
    axes = [parse_axis("--blocks", "engine.num_blocks", "100,200,400")]
    serial = run_sweep(source(), axes)
    on_ray = run_sweep(source(), axes, backend=Backend.RAY)
    assert on_ray.equals(serial)


def test_a_capacity_search_on_ray_is_the_search_with_j1(local_ray):
    targets = [SloTarget("ttft_p99", 0.5)]
    serial = capacity_frame(run_capacity(source(), targets, tolerance=0.1), targets)
    on_ray = capacity_frame(run_capacity(source(), targets, tolerance=0.1,
                                         backend=Backend.RAY), targets)
    assert on_ray.equals(serial)


def test_address_without_ray_backend_is_refused():
    with pytest.raises(KvschedError, match="--address needs --backend ray"):
        run_jobs(abs, [1], address="ray://nowhere:10001")


def test_without_ray_installed_backend_ray_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    for command in (["sweep", str(path), "--blocks", "100,200"],
                    ["capacity", str(path), "--slo", "ttft_p99=1"]):
        result = CliRunner().invoke(app, [*command, "--backend", "ray",
                                          "--out", str(tmp_path / "o")])
        assert result.exit_code == 2
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "pip install 'kvsched[ray]'" in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_tasks_input_error_comes_back_as_one_line(local_ray):
    """A KvschedError raised in a Ray task is that error again, not Ray's wrapping."""
    with pytest.raises(KvschedError) as caught:
        run_jobs(SloTarget.parse, ["nonsense"], Backend.RAY)
    assert "METRIC=LIMIT" in str(caught.value) and "\n" not in str(caught.value)
