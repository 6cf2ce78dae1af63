"""Attacks and faults through the CLI: nothing outside --out, nothing lost, every failure one
line, no user code run by validate, no hang or crash on hostile input."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsched.cli import app

SMALL = """\
name: lab
seed: 1
engine: {max_num_batched_tokens: 512, num_blocks: 60}
workload: {kind: synthetic, num_requests: 12, arrival: {kind: poisson, rate: 0.5},
           prompt_len: {kind: uniform, low: 10, high: 100}, output_len: 8}
variants:
  - {name: big}
  - {name: small, engine: {num_blocks: 30}}
  - {name: tiny, engine: {num_blocks: 20}}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(result, code: int = 2) -> str:
    """The single stderr line of a failed command (no traceback, the funnel's exit code)."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def kvsched(*args: str | Path, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvsched", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return write(tmp_path, "lab.yaml", SMALL)


# -- names that become paths ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../../escaped", "a/b", "..", ".", ".hidden", "a\nb",
                                  "x\x1b[31m", "summary.csv", "run.json", "ttft.png", ""])
def test_sweep_name_is_one_safe_path_component(tmp_path, name):
    """sweep --name that is not one plain folder name is refused; nothing is written."""
    out = tmp_path / "a" / "b" / "out"
    line = one_error(invoke("sweep", "--budget", "128,256", "--out", out, "--name", name))
    assert "--name" in line
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(("field", "value"), [
    ("name", "../up"), ("name", "sweep-lab"), ("name", ".staging"), ("name", "a\\nb"),
    ("variant", "summary.csv"), ("variant", "run.json"), ("variant", "../x"),
    ("variant", "timeline-a.png"), ("variant", ".."),
])
def test_scenario_and_variant_names_cannot_leave_or_clobber(tmp_path, field, value):
    """A scenario or variant name that would escape --out or land on a file a run writes."""
    text = SMALL.replace("name: lab", f'name: "{value}"') if field == "name" else \
        SMALL.replace("{name: small,", f'{{name: "{value}",')
    path = write(tmp_path, "s.yaml", text)
    out = tmp_path / "out"
    line = one_error(invoke("run", path, "--out", out))
    assert "name" in line
    assert "\n" not in line
    assert files_under(tmp_path) == ["s.yaml"]


def test_set_name_is_checked_too(small, tmp_path):
    """--set name=../x is refused like the file's own name."""
    line = one_error(invoke("run", small, "--set", "name=../x", "--out", tmp_path / "out"))
    assert "name" in line
    assert not (tmp_path / "out").exists()


# -- user policies -------------------------------------------------------------------------


def test_validate_never_imports_a_users_policy(tmp_path):
    """validate checks only the shape of package.module:Class: the module is not run."""
    marker = tmp_path / "ran"
    write(tmp_path, "evilpolicy.py", f"open({str(marker)!r}, 'w').write('x')\n"
                                     "class P:\n    def key(self, r, t):\n        return (0,)\n")
    path = write(tmp_path, "s.yaml", SMALL + "policy: {name: 'evilpolicy:P'}\n")
    result = kvsched("validate", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_function_named_as_policy_is_never_called(tmp_path, command):
    """policy: os:system is refused before anything is called: no shell command runs."""
    marker = tmp_path / "pwned"
    path = write(tmp_path, "s.yaml", SMALL + f"policy: {{name: 'os:system', command: "
                                             f"'touch {marker}'}}\n")
    result = kvsched(command, path, "--out", tmp_path / "out", cwd=tmp_path) \
        if command == "run" else kvsched(command, path, cwd=tmp_path)
    assert not marker.exists()
    if command == "run":
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "not a class" in lines[0], result.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("module", "problem"), [
    ("class P:\n    pass\n", "no key"),
    ("P = 3\n", "not a class"),
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
])
def test_a_user_class_that_is_not_a_policy_is_one_line(tmp_path, module, problem):
    """A user module that fails to import, or a Name that is not a policy class: one line."""
    write(tmp_path, "notpolicy.py", module)
    path = write(tmp_path, "s.yaml", SMALL + "policy: {name: 'notpolicy:P'}\n")
    result = kvsched("run", path, "--out", tmp_path / "out", cwd=tmp_path / "..")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and problem in lines[0] and "policy" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_user_policy_loads_from_the_scenario_folder(tmp_path):
    """A policy module beside the scenario file loads without PYTHONPATH."""
    folder = tmp_path / "mine"
    write(folder, "mypolicies.py", """\
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class LongestOutputFirst:
            aging: float = 0.0
            def key(self, request, enqueue_time):
                return (-request.output_len,)
        """)
    path = write(folder, "s.yaml", SMALL + "policy: {name: 'mypolicies:LongestOutputFirst'}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = kvsched("run", path, "--out", tmp_path / "out", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "lab" / "big" / "requests.csv").is_file()


# -- results replace only what the run produced ---------------------------------------------


def test_run_of_one_variant_keeps_the_others(small, tmp_path):
    """--variant replaces that variant's folder and summary row, keeps the rest; says so."""
    out = tmp_path / "out"
    assert invoke("run", small, "--out", out).exit_code == 0
    folder = out / "lab"
    (folder / "timeline-big.png").write_bytes(b"picture")  # as --plot would have drawn
    before = pd.read_csv(folder / "summary.csv")
    big = (folder / "big" / "requests.csv").read_bytes()
    result = invoke("run", small, "--out", out, "--variant", "small",
                    "--set", "engine.num_blocks=25")
    assert result.exit_code == 0, result.output
    assert f"replaced the previous results of small in {folder}/" in result.stderr
    assert "kept big, tiny" in result.stderr
    after = pd.read_csv(folder / "summary.csv")
    assert list(after.variant) == ["big", "small", "tiny"]
    assert after.loc[0].equals(before.loc[0]) and after.loc[2].equals(before.loc[2])
    assert (folder / "big" / "requests.csv").read_bytes() == big
    assert (folder / "timeline-big.png").read_bytes() == b"picture"
    assert (folder / "tiny" / "summary.json").is_file()
    assert "engine.num_blocks=25" in (folder / "small" / "run.json").read_text()
    assert [p.name for p in out.iterdir()] == ["lab"]  # no staging folder left


def test_full_rerun_is_byte_identical(small, tmp_path):
    """Running all variants again gives the same summary.csv, byte for byte."""
    out = tmp_path / "out"
    assert invoke("run", small, "--out", out).exit_code == 0
    first = (out / "lab" / "summary.csv").read_bytes()
    assert invoke("run", small, "--out", out, "--variant", "big").exit_code == 0
    assert (out / "lab" / "summary.csv").read_bytes() == first
    assert invoke("run", small, "--out", out).exit_code == 0
    assert (out / "lab" / "summary.csv").read_bytes() == first


def test_a_second_sweep_with_another_name_keeps_the_first(small, tmp_path):
    """Sweeps with different --name live side by side; the same name is replaced, said so."""
    out = tmp_path / "out"
    assert invoke("sweep", small, "--blocks", "30,60", "--out", out, "--name", "one",
                  "--variant", "big").exit_code == 0
    first = (out / "sweep-one" / "summary.csv").read_bytes()
    result = invoke("sweep", small, "--blocks", "40,80", "--out", out, "--name", "two",
                    "--variant", "big")
    assert result.exit_code == 0 and "replaced" not in result.stderr
    assert (out / "sweep-one" / "summary.csv").read_bytes() == first
    result = invoke("sweep", small, "--blocks", "40", "--out", out, "--name", "one",
                    "--variant", "big")
    assert result.exit_code == 0 and "replaced" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["sweep-one", "sweep-two"]


# -- where results cannot go -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_out_that_is_a_file_or_under_a_file(small, tmp_path, command, where):
    """--out naming a file, or a folder under a file: one line before anything runs."""
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me")
    out = blocker if where == "file" else blocker / "sub" / "out"
    args = ["run", small] if command == "run" else ["sweep", small, "--blocks", "30,60"]
    line = one_error(invoke(*args, "--out", out))
    assert "--out" in line and "a file" in line
    assert blocker.read_text() == "keep me"


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_read_only_out(small, tmp_path, monkeypatch, command):
    """An --out that cannot be written: one line, nothing written (also as root, where chmod
    does not stop writes: the check is made the same way)."""
    out = tmp_path / "ro"
    out.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if (
        Path(p) == out and mode & os.W_OK) else real_access(p, mode, **kw))
    args = ["run", small] if command == "run" else ["sweep", small, "--blocks", "30,60"]
    line = one_error(invoke(*args, "--out", out))
    assert "not writable" in line
    assert files_under(out) == []


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_disk_full_leaves_nothing_partial(small, tmp_path, monkeypatch, command):
    """ENOSPC while writing: one line, no staging folder or .summary.csv.<pid> left behind."""
    import kvsched.analysis.sweep
    import kvsched.report
    import kvsched.runner

    out = tmp_path / "out"
    calls = {"n": 0}
    real_frame = kvsched.report.write_csv
    real_rows = kvsched.runner.write_rows

    def cut_short(path):  # the second file (the sweep's first) is cut short
        calls["n"] += 1
        if calls["n"] >= (2 if command == "run" else 1):
            path.write_text("partial")
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_frame(frame, path):
        cut_short(path)
        real_frame(frame, path)

    def full_rows(path, header, rows):
        cut_short(path)
        real_rows(path, header, rows)

    monkeypatch.setattr(kvsched.runner, "write_rows", full_rows)
    monkeypatch.setattr(kvsched.analysis.sweep, "write_csv", full_frame)
    args = ["run", small] if command == "run" else ["sweep", small, "--blocks", "30,60"]
    line = one_error(invoke(*args, "--out", out))
    assert "No space left on device" in line and "disk full" in line
    assert files_under(out) == []


# -- signals ----------------------------------------------------------------------------------


PATCHED_RUN = """\
import os, signal, sys
import kvsched.runner as runner
real = runner.write_rows
def write_then_term(path, header, rows):
    real(path, header, rows)
    os.kill(os.getpid(), signal.SIGTERM)
runner.write_rows = write_then_term
from kvsched.cli import main
sys.argv = ["kvsched", "run", sys.argv[1], "--out", sys.argv[2]]
main()
"""


def test_sigterm_while_writing_removes_the_staging_folder(small, tmp_path):
    """SIGTERM in the middle of writing records: exit 143, no .lab.* folder left."""
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-c", PATCHED_RUN, str(small), str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(out) == []


PATCHED_SWEEP = """\
import os, sys, time
from kvsched.analysis import sweep
where = sys.argv[2]
def hang(job):
    open(os.path.join(where, f"worker-{os.getpid()}"), "w").close()
    time.sleep(600)
sweep._run_point = hang
from kvsched.cli import main
sys.argv = ["kvsched", "sweep", sys.argv[1], "--blocks", "30,60,90,120", "-j", "2",
            "--out", os.path.join(sys.argv[2], "out")]
main()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its reaper is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_for(condition, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_sigterm_to_a_sweep_ends_its_workers(small, tmp_path, signum):
    """SIGTERM (or SIGKILL, which cannot be handled) to the sweep's process: its worker
    processes end too, nothing is written."""
    parent = subprocess.Popen([sys.executable, "-c", PATCHED_SWEEP, str(small), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: len(list(tmp_path.glob("worker-*"))) == 2), \
            parent.stderr.read() if parent.poll() is not None else "workers never started"
        workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
        parent.send_signal(signum)
        parent.wait(timeout=60)
        assert parent.returncode == (128 + signum if signum == signal.SIGTERM else -signum)
        assert _wait_for(lambda: not any(_alive(pid) for pid in workers))
        assert not (tmp_path / "out").exists() or files_under(tmp_path / "out") == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for path in tmp_path.glob("worker-*"):
            pid = int(path.name.split("-")[1])
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# -- hostile input ----------------------------------------------------------------------------

BOMB = """\
name: bomb
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize(("text", "expected"), [
    (BOMB, "expands to over"),
    ("name: x\nw: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    ("name: x\nw: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "nested deeper than"),
])
def test_yaml_bombs_and_deep_nesting_are_refused(tmp_path, command, text, expected):
    """An alias bomb or thousands of nested brackets: one line, the cap named."""
    path = write(tmp_path, "s.yaml", text)
    extra = ["--out", tmp_path / "out"] if command == "run" else []
    line = one_error(invoke(command, path, *extra))
    assert expected in line


@pytest.mark.parametrize(("fragment", "field", "bound"), [
    ("arrival: {kind: gamma, rate: 1, cv: 1.0e-200}", "arrival.cv", ">= 0.001"),
    ("arrival: {kind: gamma, rate: 1, cv: 1.0e+200}", "arrival.cv", "<= 1000"),
    ("arrival: {kind: poisson, rate: 1.0e-320}", "arrival.rate", ">= 1e-09"),
    ("arrival: {kind: poisson, rate: 1.0e+300}", "arrival.rate", "<= 1000000000"),
    ("arrival: {kind: fixed, interval: 1.0e-300}", "arrival.interval", ">= 1e-09"),
    ("arrival: {kind: all_at_once, at: 1.0e+300}", "arrival.at", "<= 1000000000000"),
    ("prompt_len: {kind: lognormal, median: 1.0e+300, sigma: 1}", "prompt_len.median",
     "<= 10000000"),
    ("prompt_len: {kind: lognormal, median: 100, sigma: 1.0e+10}", "prompt_len.sigma",
     "<= 10"),
    ("prompt_len: 100000000000000000000000", "prompt_len.value", "<= 10000000"),
    ("prompt_len: {kind: uniform, low: 1, high: 100000000000000000000000}",
     "prompt_len.high", "<= 10000000"),
    ("priority: 100000000000000000000000", "priority", "<= 1000000000"),
])
def test_extreme_distribution_parameters_name_the_bound(tmp_path, fragment, field, bound):
    """Every synthetic parameter is bounded in the schema; the bound is in the message."""
    spec = {"arrival": "arrival: {kind: poisson, rate: 1}", "prompt_len": "prompt_len: 10",
            "priority": ""}
    key = fragment.split(":")[0]
    spec[key] = fragment
    priority = f", {spec['priority']}" if spec["priority"] else ""
    text = (f"name: x\nworkload: {{kind: synthetic, num_requests: 5, {spec['arrival']}, "
            f"{spec['prompt_len']}, output_len: 3{priority}}}\n")
    path = write(tmp_path, "s.yaml", text)
    for command in ("validate", "run"):
        extra = ["--out", tmp_path / "out"] if command == "run" else []
        line = one_error(invoke(command, path, *extra))
        assert f"workload.{field}: expected a value {bound}" in line, line


def test_no_numpy_warning_before_the_error(tmp_path):
    """A trace with inf: the first bad row is named, and nothing else reaches stderr."""
    write(tmp_path, "t.csv", "arrival_time,prompt_len,output_len\n0,inf,5\n1,nan,3\n")
    path = write(tmp_path, "s.yaml", "name: x\nworkload: {kind: trace, format: kvsched, "
                                     "path: t.csv}\n")
    result = kvsched("run", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "line 2: column 'prompt_len': expected a finite number, got 'inf'" in result.stderr


@pytest.mark.parametrize("args", [
    ("--budget", "1..1e308:x1.0000001"),
    ("--budget", "1..1e12:+1"),
    ("--budget", "1..1e5:+1", "--blocks", "1..1e5:+1"),
    ("--budget", "1..1e3:+1", "--blocks", "1..1e3:+1"),
])
def test_every_sweep_range_is_capped_with_the_count(args):
    """Multiplying ranges and their products are capped like additive ones, count named."""
    line = one_error(invoke("sweep", *args, "--out", "/nonexistent-kvsched-out"))
    assert "at most 100,000" in line
    assert any(ch.isdigit() for ch in line.split("has")[1])


def test_sweep_jobs_zero_is_one_line(tmp_path):
    """-j 0 is refused in one line, not with click's usage block."""
    line = one_error(invoke("sweep", "--budget", "128,256", "-j", "0", "--out", tmp_path))
    assert "--jobs" in line


def test_usage_errors_are_one_line_from_the_console_script(tmp_path):
    """Click's usage errors (a bad option value, a missing argument) are one line too."""
    for args in (["sweep", "-j", "x"], ["run"], ["run", "--bogus", "x.yaml"], ["nosuch"]):
        result = kvsched(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("error: ")


def test_version(tmp_path):
    """kvsched --version prints the version."""
    from kvsched import __version__

    result = kvsched("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"kvsched {__version__}"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """A scenario path that is a FIFO (or a device) is refused; validate does not block."""
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    for args in (["validate", fifo], ["run", fifo, "--out", tmp_path / "out"],
                 ["validate", "/dev/null"]):
        line = one_error(invoke(*args))
        assert "not a regular file" in line


def test_file_contents_are_never_echoed_at_length(tmp_path):
    """A file that is not a scenario: at most a short escaped excerpt of it in the message."""
    secret = "root:$6$" + "x" * 500 + ":19000:0:99999:7:::"
    path = write(tmp_path, "shadow", secret + "\nsecond line\n")
    line = one_error(invoke("validate", path))
    assert secret not in line and "x" * 100 not in line
    assert len(line) < 250
    write(tmp_path, "t.csv", "a,b\n" + "y" * 400 + ",1\n")
    path = write(tmp_path, "s.yaml", "name: x\nworkload: {kind: trace, path: t.csv, columns: "
                                     "{arrival_time: a, prompt_len: b, output_len: b}}\n")
    line = one_error(invoke("validate", path))
    assert "y" * 100 not in line
    environ = "\0".join(f"SECRET_{i}=value{i}" for i in range(50))  # like /proc/self/environ
    write(tmp_path, "env.csv", environ)
    path = write(tmp_path, "e.yaml", "name: x\nworkload: {kind: trace, format: kvsched, "
                                     "path: env.csv}\n")
    line = one_error(invoke("validate", path))
    assert "SECRET_3" not in line and "\\x00" in line


def test_a_newline_in_a_value_never_splits_the_error_line(tmp_path):
    """A policy or variant name with newlines and escapes: still exactly one line."""
    path = write(tmp_path, "s.yaml", 'name: x\npolicy: "fc\\nfs\\u001b[2J"\n' + SMALL.split(
        "\n", 1)[1])
    line = one_error(invoke("validate", path))
    assert "\\n" in line and "\x1b" not in line
    line = one_error(invoke("run", write(tmp_path, "t.yaml", SMALL), "--variant", "a\nb",
                            "--out", tmp_path / "out"))
    assert "a\\nb" in line


def test_validate_does_not_build_a_synthetic_workload(tmp_path, monkeypatch):
    """10M synthetic requests validate without generating one of them."""
    import kvsched.workload.build

    def never(*args, **kwargs):
        raise AssertionError("validate generated the workload")

    monkeypatch.setattr(kvsched.workload.build, "_synthetic", never)
    path = write(tmp_path, "s.yaml", "name: x\nworkload: {kind: synthetic, num_requests: "
                                     "10000000, arrival: {kind: poisson, rate: 1}, "
                                     "prompt_len: 5, output_len: 5}\n")
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output
    assert "10,000,000 requests" in result.stdout


# -- the newcomer's path -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def test_shipped_files_stand_alone():
    """README, docs/ and every shipped file point to nothing outside the repository
    (../shared)."""
    shipped = [REPO / "README.md", *(REPO / "docs").glob("*.md"),
               REPO / "pyproject.toml", REPO / "Makefile",
               *(REPO / "kvsched").rglob("*.py"), *(REPO / "scenarios").rglob("*.yaml"),
               *(REPO / "scenarios").rglob("*.md"), *(REPO / "bench").rglob("*.py")]
    for path in shipped:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/shared" not in text, path


def test_license_is_an_spdx_string():
    """project.license is an SPDX string (the table form is deprecated in setuptools)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "MIT"


def test_scenarios_marks_files_validate_rejects(tmp_path):
    """kvsched scenarios lists a broken file as INVALID with the reason, on its own line."""
    write(tmp_path, "good.yaml", SMALL)
    write(tmp_path, "bad.yaml", SMALL.replace("num_blocks: 60", "num_blocks: -1"))
    write(tmp_path, "trace.yaml", "name: tr\nworkload: {kind: trace, format: kvsched, "
                                  "path: missing.csv}\n")
    result = invoke("scenarios", "--dir", tmp_path)
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert "INVALID" in rows[str(tmp_path / "bad.yaml")]
    assert "num_blocks" in rows[str(tmp_path / "bad.yaml")]
    assert "INVALID" in rows[str(tmp_path / "trace.yaml")]  # validate reads trace files too
    assert "INVALID" not in rows[str(tmp_path / "good.yaml")]


def test_title_names_what_set_overrode(small, tmp_path):
    """The description above the table says which values --set and --seed replaced."""
    small.write_text(SMALL.replace("seed: 1\n", "seed: 1\ndescription: A pool of 60 blocks.\n"))
    result = invoke("run", small, "--out", tmp_path / "out", "--set", "engine.num_blocks=120",
                    "--seed", "5")
    assert result.exit_code == 0, result.output
    title = result.stdout.splitlines()[0]
    assert title.startswith("== lab: A pool of 60 blocks")
    assert "[overridden: --set engine.num_blocks=120, --seed 5]" in title
    plain = invoke("run", small, "--out", tmp_path / "out2").stdout.splitlines()[0]
    assert "overridden" not in plain


LENGTHS = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n" + "".join(
    f"{p},{o},{p + o},{p / o}\n" for p, o in [(74, 918), (290, 905), (1200, 7), (5, 3)] * 5)


@pytest.mark.parametrize("arrival", ["{kind: poisson, rate: 2}", "{kind: gamma, rate: 2, cv: 3}",
                                     "{kind: fixed, interval: 0.5}"])
def test_lengths_trace_keeps_each_pair_with_arrivals_from_a_process(tmp_path, arrival):
    """format: lengths replays each (prompt, output) pair in file order; times from the
    seeded process (same seed, same times)."""
    write(tmp_path, "t.csv", LENGTHS)
    path = write(tmp_path, "s.yaml", f"name: len\nseed: 3\ntime: {{kind: constant, step_time: "
                                     f"0.05}}\nworkload: {{kind: trace, format: lengths, "
                                     f"path: t.csv, arrival: {arrival}}}\n")
    out = tmp_path / "out"
    assert invoke("run", path, "--out", out).exit_code == 0
    requests = pd.read_csv(out / "len" / "base" / "requests.csv")
    assert list(zip(requests.prompt_len, requests.output_len, strict=True)) == [
        (74, 918), (290, 905), (1200, 7), (5, 3)] * 5
    assert requests.arrival_time.iloc[0] == 0 and requests.arrival_time.is_monotonic_increasing
    if "fixed" in arrival:
        assert list(requests.arrival_time) == [0.5 * i for i in range(20)]
    first = (out / "len" / "base" / "requests.csv").read_bytes()
    assert invoke("run", path, "--out", out).exit_code == 0
    assert (out / "len" / "base" / "requests.csv").read_bytes() == first


@pytest.mark.parametrize(("workload", "expected"), [
    ("{kind: trace, format: lengths, path: t.csv}", "needs an arrival process"),
    ("{kind: trace, format: kvsched, path: t.csv, arrival: {kind: poisson, rate: 1}}",
     "arrival is for length-only traces"),
    ("{kind: trace, columns: {prompt_len: a, output_len: b}, path: t.csv}",
     "needs an arrival process"),
])
def test_lengths_trace_errors(tmp_path, workload, expected):
    """A length-only trace without arrivals, or arrivals for a timed trace: one line."""
    write(tmp_path, "t.csv", LENGTHS)
    path = write(tmp_path, "s.yaml", f"name: len\nworkload: {workload}\n")
    assert expected in one_error(invoke("validate", path))


def test_lengths_trace_by_columns(tmp_path):
    """columns without arrival_time also make a length-only trace."""
    write(tmp_path, "t.csv", "a,b\n10,2\n20,3\n")
    path = write(tmp_path, "s.yaml", "name: len\nworkload: {kind: trace, path: t.csv, columns: "
                                     "{prompt_len: a, output_len: b}, arrival: "
                                     "{kind: all_at_once}}\n")
    out = tmp_path / "out"
    assert invoke("run", path, "--out", out).exit_code == 0
    requests = pd.read_csv(out / "len" / "base" / "requests.csv")
    assert list(requests.prompt_len) == [10, 20] and list(requests.arrival_time) == [0, 0]


# -- tables that fit -----------------------------------------------------------------------------


def table_lines(stdout: str) -> list[str]:
    """The comparison table's lines: from its header to the blank line after it."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("variant"))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


def test_table_fits_the_terminal_and_wide_shows_all(small, tmp_path):
    """With a 100-column terminal the table drops its minor columns and says so; --wide (or
    output to a pipe) keeps every column, with the time unit in the headers."""
    out = tmp_path / "out"
    narrow = CliRunner(env={"COLUMNS": "100"}).invoke(app, ["run", str(small), "--out", str(out)])
    assert narrow.exit_code == 0, narrow.output
    lines = table_lines(narrow.stdout)
    assert all(len(line) <= 100 for line in lines), lines
    assert "--wide shows them" in lines[-1]
    assert "TTFT p50 (steps)" in lines[0] and "incidents" in lines[0]
    assert "peak blocks" not in lines[0]
    for args in (["--wide"], []):
        env = {"COLUMNS": "100"} if args else {}
        wide = CliRunner(env=env).invoke(app, ["run", str(small), "--out", str(out), *args])
        header = table_lines(wide.stdout)[0]
        for title in ("TTFT mean (steps)", "p95 (steps)", "e2e p99 (steps)", "peak blocks",
                      "recomputed (tokens)", "tokens/step"):
            assert title in header, header
        assert "rejected" not in header and "goodput" not in header


def test_table_shows_rejected_and_goodput_with_admission(small, tmp_path):
    """Where admission or an SLO is set, the table has rejected and goodput columns."""
    small.write_text(SMALL + "slo: {ttft: 5}\nadmission: {ttft_slo: 5}\n")
    result = invoke("run", small, "--out", tmp_path / "out", "--wide")
    assert result.exit_code == 0, result.output
    header = table_lines(result.stdout)[0]
    assert "rejected" in header and "goodput (req/step)" in header


def test_sweep_table_fits_too(small, tmp_path):
    """The sweep's table also fits the terminal; its TTFT headers carry the unit."""
    result = CliRunner(env={"COLUMNS": "100"}).invoke(app, [
        "sweep", str(small), "--blocks", "30,60", "--variant", "big", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "TTFT p50 (steps)" in lines[0]
    table = [line for line in lines if not line.startswith("records:")]
    assert all(len(line) <= 100 for line in table), lines


def test_signals_are_held_while_results_are_renamed(small, tmp_path, monkeypatch):
    """A SIGTERM that arrives while the old results are moved aside cannot lose them: it is
    held until the new folder is in place, then ends the run."""
    import kvsched.paths

    out = tmp_path / "out"
    assert invoke("run", small, "--out", out).exit_code == 0
    real = os.replace
    delivered = []

    def replace_and_signal(source, target):
        real(source, target)
        if not delivered and ".old-" in str(target):  # between the two renames
            delivered.append(True)
            signal.raise_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    monkeypatch.setattr(kvsched.paths.os, "replace", replace_and_signal)
    try:
        with pytest.raises(SystemExit):
            from kvsched.cli import run

            run([small], out=out, variant=["big"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert delivered
    assert sorted(p.name for p in out.iterdir()) == ["lab"]
    assert (out / "lab" / "big" / "requests.csv").is_file()
    assert (out / "lab" / "small" / "requests.csv").is_file()
