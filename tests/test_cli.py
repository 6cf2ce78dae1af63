"""The `kvsched` command: run, sweep, validate, policies, scenarios, help (through CliRunner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner

from kvsched.analysis.sweep import parse_axis
from kvsched.cli import app
from kvsched.records import EVENT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS
from kvsched.records.metrics import SUMMARY_KEYS

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("run", "sweep", "validate", "policies", "scenarios")  # the list
ALL_COMMANDS = sorted(typer.main.get_command(app).commands)  # those and any added since
RECORD_FILES = ("requests.csv", "steps.csv", "events.csv", "summary.json", "run.json")

LAB = """\
name: lab
description: A small lab scenario. Two pools.
seed: 3
engine: {max_num_batched_tokens: 512, num_blocks: 60, block_size: 16}
workload:
  kind: synthetic
  num_requests: 30
  arrival: {kind: poisson, rate: 0.5}
  mix:
    - {name: short, weight: 3, prompt_len: {kind: uniform, low: 10, high: 100},
       output_len: {kind: uniform, low: 5, high: 20}}
    - {name: long, weight: 1, prompt_len: {kind: uniform, low: 200, high: 400}, output_len: 10}
variants:
  - {name: big}
  - {name: small, engine: {num_blocks: 30}}
expect:
  - {variant: big, metric: num_finished, op: "==", value: 30, note: all done}
  - {variant: small, metric: num_finished, per: num_requests, op: "==", value: 1}
"""


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """The small two-variant scenario file."""
    path = tmp_path / "lab.yaml"
    path.write_text(LAB, encoding="utf-8")
    return path


def header(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[0].split(",")


def csv_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.csv"))}


def run_ok(*args: str | Path):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


# -- run -----------------------------------------------------------------------------


def test_run_writes_every_record_file(lab, tmp_path):
    """run writes <out>/<scenario>/<variant>/{requests,steps,events}.csv, summary/run.json."""
    out = tmp_path / "out"
    run_ok("run", lab, "--out", out)
    assert sorted(p.name for p in (out / "lab").iterdir()) == ["big", "small", "summary.csv"]
    for variant in ("big", "small"):
        assert sorted(p.name for p in (out / "lab" / variant).iterdir()) == sorted(RECORD_FILES)
    assert not [p for p in out.rglob(".*")]  # no staging folder left behind


def test_run_csv_columns_are_the_contract(lab, tmp_path):
    """steps/events.csv have exactly the contract columns; requests.csv starts with them."""
    out = tmp_path / "out"
    run_ok("run", lab, "--out", out)
    folder = out / "lab" / "small"
    assert header(folder / "requests.csv")[:len(REQUEST_COLUMNS)] == list(REQUEST_COLUMNS)
    assert header(folder / "steps.csv") == list(STEP_COLUMNS)
    assert header(folder / "events.csv") == list(EVENT_COLUMNS)
    requests = pd.read_csv(folder / "requests.csv")
    assert len(requests) == 30
    assert set(requests["class"]) == {"short", "long"}


def test_run_summary_csv_has_one_row_per_variant_matching_summary_json(lab, tmp_path):
    """summary.csv: one row per variant, in order, with the figures of its summary.json."""
    out = tmp_path / "out"
    run_ok("run", lab, "--out", out)
    table = pd.read_csv(out / "lab" / "summary.csv")
    assert list(table["variant"]) == ["big", "small"]
    assert set(SUMMARY_KEYS) <= set(table.columns)
    for row in table.to_dict("records"):
        summary = json.loads((out / "lab" / row["variant"] / "summary.json").read_text())
        assert summary["variant"] == row["variant"]
        for key in ("num_requests", "num_finished", "num_preemptions", "ttft_p99",
                    "tokens_per_step"):
            assert row[key] == pytest.approx(summary[key], rel=1e-9)


def test_run_prints_a_comparison_table_and_the_checks(lab, tmp_path):
    """The table has a row per variant; expectations follow with pass/fail."""
    result = run_ok("run", lab, "--out", tmp_path / "out")
    lines = result.stdout.splitlines()
    assert any(line.startswith("big ") for line in lines)
    assert any(line.startswith("small ") for line in lines)
    assert "TTFT" in result.stdout and "preempt" in result.stdout
    assert sum(line.startswith("pass ") for line in lines) == 2


def test_record_batches_adds_batches_csv(lab, tmp_path):
    """--record-batches adds batches.csv per variant; without it there is none."""
    run_ok("run", lab, "--out", tmp_path / "plain")
    run_ok("run", lab, "--out", tmp_path / "batches", "--record-batches")
    assert not list((tmp_path / "plain").rglob("batches.csv"))
    batches = tmp_path / "batches" / "lab" / "big" / "batches.csv"
    assert header(batches) == ["step", "time", "request_id", "phase", "num_tokens"]
    assert set(pd.read_csv(batches)["phase"]) >= {"prefill", "decode"}


def test_run_json_prints_the_summaries(lab, tmp_path):
    """--json prints a JSON list: one object per variant with `variant` and the summary keys."""
    out = tmp_path / "out"
    result = run_ok("run", lab, "--out", out, "--json")
    payload = json.loads(result.stdout)
    assert [item["variant"] for item in payload] == ["big", "small"]
    for item in payload:
        assert set(SUMMARY_KEYS) <= set(item)
        written = json.loads((out / "lab" / item["variant"] / "summary.json").read_text())
        assert {k: item[k] for k in SUMMARY_KEYS} == {k: written[k] for k in SUMMARY_KEYS}


def test_run_variant_selects(lab, tmp_path):
    """--variant runs only the named variant(s)."""
    out = tmp_path / "out"
    result = run_ok("run", lab, "--out", out, "--variant", "small", "--json")
    assert [item["variant"] for item in json.loads(result.stdout)] == ["small"]
    assert sorted(p.name for p in (out / "lab").iterdir()) == ["small", "summary.csv"]


def test_check_fails_with_exit_1_and_no_check_exits_0(lab, tmp_path):
    """A failing expectation: exit 1 by default (records still written), 0 with --no-check."""
    failing = tmp_path / "failing.yaml"
    failing.write_text(LAB + "  - {variant: small, metric: num_preemptions, op: '<', value: 0}\n")
    result = invoke("run", failing, "--out", tmp_path / "a")
    assert result.exit_code == 1
    assert "FAIL" in result.stdout
    assert (tmp_path / "a" / "lab" / "small" / "requests.csv").is_file()
    assert invoke("run", failing, "--out", tmp_path / "b", "--no-check").exit_code == 0
    assert invoke("run", failing, "--out", tmp_path / "c", "--check").exit_code == 1


def test_run_json_lets_you_rerun_the_variant(lab, tmp_path):
    """run.json's `resolved` mapping, loaded as a scenario, reproduces the summary."""
    out = tmp_path / "out"
    first = json.loads(run_ok("run", lab, "--out", out, "--json").stdout)
    record = json.loads((out / "lab" / "small" / "run.json").read_text())
    assert record["variant"] == "small" and record["seed"] == 3
    assert record["kvsched_version"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = elsewhere / "again.yaml"
    again.write_text(yaml.safe_dump(record["resolved"]))
    rerun = json.loads(run_ok("run", again, "--out", tmp_path / "out2", "--json").stdout)
    original = next(item for item in first if item["variant"] == "small")
    assert {k: rerun[0][k] for k in SUMMARY_KEYS} == {k: original[k] for k in SUMMARY_KEYS}


def test_run_json_of_a_trace_workload_reruns_from_another_folder(tmp_path):
    """A relative trace path is recorded so that the rerun finds the trace from anywhere."""
    lab = tmp_path / "lab"
    (lab / "traces").mkdir(parents=True)
    (lab / "traces" / "t.csv").write_text(
        "arrival_time,prompt_len,output_len\n0,300,5\n0,20,5\n1,40,4\n3,900,2\n")
    scenario = lab / "trace.yaml"
    scenario.write_text("name: tr\nworkload: {kind: trace, format: kvsched, "
                        "path: traces/t.csv}\n")
    first = json.loads(run_ok("run", scenario, "--out", tmp_path / "out", "--json").stdout)
    record = json.loads((tmp_path / "out" / "tr" / "base" / "run.json").read_text())
    again = tmp_path / "again.yaml"
    again.write_text(json.dumps(record["resolved"]))
    rerun = json.loads(run_ok("run", again, "--out", tmp_path / "out2", "--json").stdout)
    assert {k: rerun[0][k] for k in SUMMARY_KEYS} == {k: first[0][k] for k in SUMMARY_KEYS}


def test_same_scenario_and_seed_give_byte_identical_csvs(lab, tmp_path):
    """Two runs of the same scenario and seed write byte-identical CSV files."""
    run_ok("run", lab, "--out", tmp_path / "one")
    run_ok("run", lab, "--out", tmp_path / "two")
    one, two = csv_bytes(tmp_path / "one"), csv_bytes(tmp_path / "two")
    assert len(one) == 7  # 3 per variant and summary.csv
    assert one == two


def test_byte_identical_across_processes_and_hash_seeds(lab, tmp_path):
    """Two `python -m kvsched run` processes with different PYTHONHASHSEED write the same CSVs."""
    for name, hash_seed in (("one", "1"), ("two", "2")):
        done = subprocess.run([sys.executable, "-m", "kvsched", "run", str(lab), "--out",
                               str(tmp_path / name)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert done.returncode == 0, done.stderr
    assert csv_bytes(tmp_path / "one") == csv_bytes(tmp_path / "two")


def test_another_seed_changes_a_synthetic_workload(lab, tmp_path):
    """--seed draws another synthetic workload: requests.csv differs; the same --seed agrees."""
    run_ok("run", lab, "--out", tmp_path / "one")
    run_ok("run", lab, "--out", tmp_path / "two", "--seed", "4")
    run_ok("run", lab, "--out", tmp_path / "three", "--seed", "4")
    requests = Path("lab") / "big" / "requests.csv"
    assert (tmp_path / "one" / requests).read_bytes() != (tmp_path / "two" / requests).read_bytes()
    assert csv_bytes(tmp_path / "two") == csv_bytes(tmp_path / "three")
    assert json.loads((tmp_path / "two" / "lab" / "big" / "run.json").read_text())["seed"] == 4


def test_set_changes_every_variant(lab, tmp_path):
    """--set engine.num_blocks=200 applies to every variant (the command line wins)."""
    out = tmp_path / "out"
    run_ok("run", lab, "--out", out, "--set", "engine.num_blocks=200", "--no-check")
    for variant in ("big", "small"):
        record = json.loads((out / "lab" / variant / "run.json").read_text())
        assert record["resolved"]["engine"]["num_blocks"] == 200
        assert record["set"] == ["engine.num_blocks=200"]


def test_run_several_scenarios(lab, tmp_path):
    """Several files in one command: each gets its folder; --json lists all variants."""
    out = tmp_path / "out"
    result = run_ok("run", lab, REPO / "scenarios" / "lesson.yaml", "--out", out, "--json")
    assert [(i["scenario"], i["variant"]) for i in json.loads(result.stdout)] == [
        ("lab", "big"), ("lab", "small"), ("lesson", "base")]
    assert (out / "lab" / "summary.csv").is_file() and (out / "lesson" / "summary.csv").is_file()


def test_rerun_leaves_summary_and_variant_folders_in_agreement(lab, tmp_path):
    """After a rerun of one variant, summary.csv lists exactly the variant folders present."""
    out = tmp_path / "out"
    run_ok("run", lab, "--out", out)
    run_ok("run", lab, "--out", out, "--variant", "big")
    folders = {p.name for p in (out / "lab").iterdir() if p.is_dir()}
    assert "big" in folders
    assert set(pd.read_csv(out / "lab" / "summary.csv")["variant"]) == folders
    assert not [p for p in out.rglob(".*")]


def test_shipped_lesson_scenario_passes_its_checks(tmp_path):
    """scenarios/lesson.yaml runs its 20 requests and every expectation passes."""
    result = run_ok("run", REPO / "scenarios" / "lesson.yaml", "--out", tmp_path, "--json")
    [summary] = json.loads(result.stdout)
    assert (summary["num_requests"], summary["num_finished"]) == (20, 20)


# -- sweep ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, values, geometric", [
    ("128..8192", (128, 256, 512, 1024, 2048, 4096, 8192), True),
    ("60..480", (60, 120, 240, 480), True),
    ("100..400:+100", (100, 200, 300, 400), False),
    ("100..350:+100", (100, 200, 300), False),
    ("1..1000:x10", (1, 10, 100, 1000), True),
    ("0..0.1:+0.05", (0, 0.05, 0.1), False),
    ("64,128,1000", (64, 128, 1000), False),
    ("64, 128, 256", (64, 128, 256), True),
    ("7", (7,), False),
])
def test_sweep_value_syntax(text, values, geometric):
    """A..B doubles, A..B:+S steps, A..B:xF multiplies, comma lists are taken as they are."""
    axis = parse_axis("--budget", "engine.max_num_batched_tokens", text)
    assert axis.values == values
    assert axis.geometric is geometric


def test_sweep_policy_values_are_names():
    """--policy fcfs,spf gives the names as strings."""
    assert parse_axis("--policy", "policy", "fcfs,spf").values == ("fcfs", "spf")


def test_sweep_without_scenario_runs_the_lesson_demo_over_doubling_budgets(tmp_path):
    """`sweep --budget 128..8192`: the lesson demo at 128, 256, ..., 8192, one row each."""
    result = run_ok("sweep", "--budget", "128..8192", "--out", tmp_path)
    table = pd.read_csv(tmp_path / "sweep-lesson" / "summary.csv")
    assert list(table["engine.max_num_batched_tokens"]) == [128, 256, 512, 1024, 2048, 4096,
                                                             8192]
    assert set(table["variant"]) == {"base"} and set(table["num_requests"]) == {20}
    assert table["num_finished"].iloc[-1] == 20
    assert table["num_starved"].iloc[0] == 20  # budget 128: r0 (1461 tokens) blocks everyone
    assert set(SUMMARY_KEYS) <= set(table.columns)
    assert "8,192" in result.stdout  # the printed table


def test_sweep_grid_of_a_step_range_and_a_list(lab, tmp_path):
    """--blocks A..B:+S with --policy a,b: every combination, first axis slowest."""
    run_ok("sweep", lab, "--blocks", "40..60:+10", "--policy", "fcfs,spf", "--variant", "big",
           "--out", tmp_path)
    table = pd.read_csv(tmp_path / "sweep-lab" / "summary.csv")
    assert list(zip(table["engine.num_blocks"], table["policy"], strict=True)) == [
        (40, "fcfs"), (40, "spf"), (50, "fcfs"), (50, "spf"), (60, "fcfs"), (60, "spf")]
    assert set(table["variant"]) == {"big"}


def test_sweep_multiplying_range_and_set_axis(lab, tmp_path):
    """A..B:xF and --set KEY=V1,V2 sweep any field; rows for every variant of the scenario."""
    run_ok("sweep", lab, "--budget", "128..2048:x4", "--set", "engine.watermark=0,0.05",
           "--out", tmp_path, "--name", "wm")
    table = pd.read_csv(tmp_path / "sweep-wm" / "summary.csv")
    assert len(table) == 3 * 2 * 2
    assert sorted(set(table["engine.max_num_batched_tokens"])) == [128, 512, 2048]
    assert sorted(set(table["engine.watermark"])) == [0, 0.05]
    assert sorted(set(table["variant"])) == ["big", "small"]


def test_sweep_point_matches_a_run_with_set(lab, tmp_path):
    """A sweep point gives the same summary as `run --set` with that value."""
    run_ok("sweep", lab, "--blocks", "45", "--variant", "small", "--out", tmp_path)
    row = pd.read_csv(tmp_path / "sweep-lab" / "summary.csv").iloc[0]
    result = run_ok("run", lab, "--set", "engine.num_blocks=45", "--variant", "small",
                    "--out", tmp_path / "run", "--json", "--no-check")
    [summary] = json.loads(result.stdout)
    for key in ("num_finished", "num_preemptions", "num_steps", "recomputed_tokens"):
        assert row[key] == summary[key]


def test_sweep_in_parallel_gives_the_same_summary(lab, tmp_path):
    """-j 2 writes the same summary.csv as -j 1."""
    args = ("sweep", lab, "--blocks", "30..60:+10", "--policy", "fcfs,spf")
    run_ok(*args, "-j", "1", "--out", tmp_path / "serial")
    run_ok(*args, "-j", "2", "--out", tmp_path / "parallel")
    serial = (tmp_path / "serial" / "sweep-lab" / "summary.csv").read_bytes()
    assert serial == (tmp_path / "parallel" / "sweep-lab" / "summary.csv").read_bytes()
    assert len(serial.splitlines()) == 1 + 4 * 2 * 2


# -- validate, policies, scenarios, help ---------------------------------------------


def test_validate_reports_each_file(lab, tmp_path, monkeypatch):
    """validate: one `ok:` line per good file with its request count; writes nothing."""
    monkeypatch.chdir(tmp_path)
    result = run_ok("validate", lab, REPO / "scenarios" / "lesson.yaml")
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("ok: ") for line in lines)
    assert "lab, 2 variant(s), 30 requests, 2 expectation(s)" in lines[0]
    assert [p.name for p in tmp_path.iterdir()] == ["lab.yaml"]


def test_validate_accepts_every_shipped_scenario():
    """Every file in scenarios/ validates (trace files included)."""
    files = sorted((REPO / "scenarios").glob("*.yaml"))
    assert len(files) >= 5
    result = run_ok("validate", *files)
    assert result.stdout.count("ok: ") == len(files)


def test_validate_bad_file_exits_2_and_still_checks_the_others(lab, tmp_path):
    """A bad file among good ones: its error on stderr, the good ones ok, exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.replace("num_blocks: 60", "num_blocks: 0"))
    result = invoke("validate", lab, bad)
    assert result.exit_code == 2
    assert result.stdout.startswith("ok: ")
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "bad.yaml:4: engine.num_blocks" in result.stderr


def test_policies_lists_the_builtins():
    """policies lists fcfs, spf and priority with their parameters."""
    result = run_ok("policies")
    for name in ("fcfs", "spf", "priority"):
        assert any(line.startswith(name) for line in result.stdout.splitlines())
    assert "aging" in result.stdout


def test_scenarios_lists_the_shipped_files(monkeypatch):
    """scenarios lists what ships in scenarios/ with its variants and headline."""
    monkeypatch.chdir(REPO)
    result = run_ok("scenarios")
    for name in ("lesson", "budget128", "budget_azure", "pool60", "spf_sustained"):
        assert f"{name}.yaml" in result.stdout
    assert "pool60_swap" in result.stdout


def test_scenarios_in_another_folder(lab):
    """scenarios --dir lists that folder's files."""
    result = run_ok("scenarios", "--dir", lab.parent)
    assert "lab.yaml" in result.stdout and "big, small" in result.stdout
    assert "A small lab scenario" in result.stdout


def test_help_lists_every_command():
    """--help names every command, the issue's five among them."""
    assert set(COMMANDS) <= set(ALL_COMMANDS)
    listed = {line.split()[0] for line in run_ok("--help").stdout.splitlines()
              if line.startswith("  ") and line.split()}
    assert set(ALL_COMMANDS) <= listed


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_each_command_help_shows_an_example(command):
    """Each command's --help ends with an example invocation of that command."""
    result = run_ok(command, "--help")
    assert f"Example: kvsched {command}" in result.stdout


def test_python_dash_m_kvsched_works():
    """`python -m kvsched --help` is the same command."""
    done = subprocess.run([sys.executable, "-m", "kvsched", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert all(command in done.stdout for command in COMMANDS)
    assert "Usage: kvsched" in done.stdout


def test_set_name_picks_the_results_folder(lab, tmp_path):
    """--set name=other writes results/other/ instead of results/lab/."""
    run_ok("run", lab, "--out", tmp_path / "out", "--set", "name=other", "--no-check")
    assert (tmp_path / "out" / "other" / "summary.csv").is_file()
    assert not (tmp_path / "out" / "lab").exists()


def test_sweep_rows_carry_the_diagnosis(lab, tmp_path):
    """Each sweep row has num_incidents, the incident_<kind> flags and the incident kinds."""
    run_ok("sweep", lab, "--budget", "16,512", "--out", tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "sweep-lab" / "summary.csv")
    assert {"num_incidents", "incident_starvation", "incidents"} <= set(frame.columns)
    tiny = frame[frame["engine.max_num_batched_tokens"] == 16]
    assert (tiny["incident_starvation"] == 1).all()  # prompts of 10..400 tokens over 16
    assert tiny["incidents"].str.contains("starvation").all()


def test_a_baseline_left_out_by_variant_is_named(lab, tmp_path):
    """--variant without the diagnosis baseline: the output says comparisons were skipped."""
    names = yaml.safe_load(lab.read_text())["variants"]
    second = names[1]["name"]
    result = run_ok("run", lab, "--variant", second, "--out", tmp_path / "out", "--no-check")
    first = names[0]["name"]
    assert f"comparisons with the baseline '{first}' skipped" in result.output


def test_the_collector_is_off_for_start_up_and_on_for_the_run(tmp_path):
    """`main` turns the collector off while kvsched starts and back on before the engines
    run (a user's policy in the Python loop may make cycles); gc stays on for library use."""
    code = (
        "import gc, sys\n"
        "import kvsched.cli.commands as cli, kvsched.runner as runner\n"
        "assert gc.isenabled()  # importing the library leaves it alone\n"
        "seen = []\n"
        "real = runner.run_scenario\n"
        "def spy(*args, **kwargs):\n"
        "    seen.append(gc.isenabled())\n"
        "    return real(*args, **kwargs)\n"
        "cli.run_scenario = runner.run_scenario = spy\n"
        "started = []\n"
        "real_load = __import__('kvsched.scenario').scenario.load_scenario\n"
        "def load(*args, **kwargs):\n"
        "    started.append(gc.isenabled())\n"
        "    return real_load(*args, **kwargs)\n"
        "__import__('kvsched.scenario').scenario.load_scenario = load\n"
        f"sys.argv = ['kvsched', 'run', {str(REPO / 'scenarios' / 'pool60.yaml')!r}, "
        f"'--out', {str(tmp_path)!r}, '--records', 'summary']\n"
        "import atexit\n"  # (the console script ends the process without returning)
        "atexit.register(lambda: print('collector:', started, seen))\n"
        "cli.main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "KVSCHED_CORE": "python"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "collector: [False] [True]", done.stdout


def test_the_console_script_imports_the_command_line_with_the_collector_off(tmp_path):
    """The console script (`kvsched.__main__:main`, pyproject's `kvsched`) imports the command
    line with the collector paused: no pass runs before the scenario is read, and the run
    has it on again."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kvsched"] == "kvsched.__main__:main"
    code = (
        "import gc, sys\n"
        "import kvsched.runner as runner, kvsched.scenario as scenario\n"
        "import kvsched.__main__ as entry\n"
        "passes, seen = [], []\n"
        "gc.callbacks.append(lambda phase, info: passes.append(phase) if phase == 'start' "
        "else None)\n"
        "real_load, real_run = scenario.load_scenario, runner.run_scenario\n"
        "def load(*args, **kwargs):\n"
        "    seen.append(len(passes))\n"
        "    return real_load(*args, **kwargs)\n"
        "def run(*args, **kwargs):\n"
        "    seen.append(gc.isenabled())\n"
        "    return real_run(*args, **kwargs)\n"
        "scenario.load_scenario, runner.run_scenario = load, run\n"
        f"sys.argv = ['kvsched', 'run', {str(REPO / 'scenarios' / 'pool60.yaml')!r}, "
        f"'--out', {str(tmp_path)!r}, '--records', 'summary']\n"
        "import atexit\n"  # (the console script ends the process without returning)
        "atexit.register(lambda: print('collector:', seen))\n"
        "passes.clear()\n"
        "entry.main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "KVSCHED_CORE": "python"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "collector: [0, True]", done.stdout


EXITING = """\
import atexit, os, sys, threading, time
class Teardown:
    def __del__(self, write=os.write):
        write(1, b"torn down\\n")
keep = Teardown()  # finalized by the interpreter's teardown, if there is one
atexit.register(print, "atexit ran")
import kvsched.cli.commands as cli
if sys.argv[1] == "thread":  # a thread that outlives the command by a tenth of a second
    leaving = threading.Event()
    real = cli._leave
    def leave(code):
        leaving.set()
        real(code)
    cli._leave = leave
    def late():
        leaving.wait()
        time.sleep(0.1)
        print("thread done", flush=True)
    threading.Thread(target=late).start()
sys.argv = ["kvsched", *sys.argv[2:]]
cli.main()
"""


@pytest.mark.parametrize("scenario, code", [("pool60.yaml", 0), ("no-such.yaml", 2)])
def test_the_console_script_ends_without_the_teardown(tmp_path, scenario, code):
    """A plain command ends the process once its atexit handlers have run and its output
    is flushed, without the interpreter's teardown; with a thread still running it leaves
    the usual way, which waits for the thread."""
    args = ["run", str(REPO / "scenarios" / scenario), "--out", str(tmp_path),
            "--records", "summary"]
    done = subprocess.run([sys.executable, "-c", EXITING, "plain", *args],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == code, done.stderr
    assert "atexit ran" in done.stdout and "torn down" not in done.stdout
    if code:
        assert done.stderr.startswith("error: ") and "no such file" in done.stderr
    else:
        assert "== pool60" in done.stdout and "records:" in done.stdout
    waited = subprocess.run([sys.executable, "-c", EXITING, "thread", *args],
                            capture_output=True, text=True, cwd=REPO)
    assert waited.returncode == code, waited.stderr
    assert "thread done" in waited.stdout and "torn down" in waited.stdout


LOGGING_POLICY = """\
from dataclasses import dataclass

LOG = open(__file__ + ".log", "w")  # never closed: the interpreter's teardown flushes it


@dataclass(frozen=True)
class Logged:
    aging: float = 0.0

    def key(self, request, enqueue_time):
        LOG.write(request.request_id + "\\n")
        return (request.arrival_time,)
"""


def test_a_command_that_ran_the_users_code_leaves_the_usual_way(tmp_path):
    """Found by review: a user's policy that leaves a file open loses what it wrote unless
    the teardown closes it, so a command that imported the user's code takes the teardown,
    with what start-up froze out of the collector's reach given back (frozen, the module
    was never finalized: its file stayed empty before this change too)."""
    (tmp_path / "logged.py").write_text(LOGGING_POLICY)
    done = subprocess.run(
        [sys.executable, "-m", "kvsched", "run", str(REPO / "scenarios" / "lesson.yaml"),
         "--out", str(tmp_path / "out"), "--set", "policy=logged:Logged", "--no-check"],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "logged.py.log").read_text().split()) >= 20  # the lesson's requests


@pytest.mark.parametrize("args, stream, code", [
    (["policies"], "stdout", 0), (["run", "no-such.yaml"], "stderr", 2)])
def test_a_closed_stream_keeps_the_exit_code(tmp_path, args, stream, code):
    """Found by review: with stdout or stderr closed by the shell (`>&-`), Python's stream is
    None; the command still exits with its own code."""
    fd = 1 if stream == "stdout" else 2
    done = subprocess.run(
        [sys.executable, "-m", "kvsched", *args], cwd=tmp_path, capture_output=True,
        preexec_fn=lambda: os.close(fd))
    assert done.returncode == code, done
