"""Where results go, through the CLI: no `--name` reaches outside `--out`, a user's file or
folder where results would go is never replaced (only a folder kvsched wrote, known by its
marker file), `capacity --out` obeys `run`'s rules, and `step-time --batches` never writes over
its input (its rows go to stdout or, whole, to `--out FILE`)."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pandas as pd
import pytest
from test_hardening import SMALL, files_under, invoke, one_error, write

MODEL = ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm")
HEADER = ("num_prefill_requests,prefill_tokens_each,prefill_cached_kv_each,num_decode_requests,"
          "mean_kv_context")
COMMANDS = ("run", "sweep", "capacity")
FOLDER = {"run": "lab", "sweep": "sweep-lab", "capacity": "capacity-lab"}
MARKER = {"run": "<variant>/run.json", "sweep": "sweep.json", "capacity": "capacity.json"}


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return write(tmp_path / "in", "lab.yaml", SMALL)


def args_of(command: str, scenario: Path) -> list[str | Path]:
    """The smallest call of each command on the scenario (one variant where it can)."""
    if command == "run":
        return ["run", scenario, "--variant", "big"]
    if command == "sweep":
        return ["sweep", scenario, "--blocks", "30,60", "--variant", "big"]
    return ["capacity", scenario, "--slo", "e2e_p99=30", "--variant", "big"]


def snapshot(folder: Path) -> dict[str, bytes | str | None]:
    """Every path under `folder` with its bytes (a link's target, None for a folder)."""
    state: dict[str, bytes | str | None] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            state[key] = "-> " + os.readlink(path)
        elif path.is_file():
            state[key] = path.read_bytes()
        else:
            state[key] = None
    return state


# -- capacity --name ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x/../../../../E", "../up", "a/b", "/abs", "a\nb", "",
                                  "..", ".", ".hidden", "capacity.csv"])
def test_capacity_name_is_one_safe_path_component(small, tmp_path, name):
    """capacity --name that is not one plain folder name: one line naming --name, nothing
    written anywhere (the search does not run)."""
    before = snapshot(tmp_path)
    out = tmp_path / "a" / "b" / "out"
    line = one_error(invoke(*args_of("capacity", small), "--out", out, "--name", name))
    assert line.startswith("error: --name: ")
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "E").exists()


@pytest.mark.parametrize("name", ["x/../../../../E", "a\nb", "", "..", "run.json"])
def test_sweep_and_capacity_check_a_name_the_same_way(small, tmp_path, name):
    """Both commands that take --name refuse the same names with the same line."""
    out = tmp_path / "out"
    sweep = one_error(invoke(*args_of("sweep", small), "--out", out, "--name", name))
    capacity = one_error(invoke(*args_of("capacity", small), "--out", out, "--name", name))
    assert sweep == capacity
    assert not out.exists()


# -- a user's file or folder where results would go ---------------------------------------


def _users_thing(place: Path, what: str, tmp_path: Path) -> None:
    if what == "file":
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_bytes(b"my own notes\n")
    elif what == "folder":
        write(place, "notes.txt", "my own folder\n")
        write(place, "sub/summary.csv", "variant\nmine\n")
    else:  # a symbolic link to a folder of the user's
        target = tmp_path / "elsewhere"
        write(target, "keep.txt", "keep me\n")
        place.parent.mkdir(parents=True, exist_ok=True)
        place.symlink_to(target, target_is_directory=True)


@pytest.mark.parametrize("what", ["file", "folder", "symlink"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_users_file_or_folder_is_never_replaced(small, tmp_path, command, what):
    """A file, a folder without the command's marker, or a symbolic link at --out/<name>:
    one line naming it and the marker, exit 2, every byte under tmp_path as it was (no
    hidden .<name>.old-PID, no staging folder)."""
    out = tmp_path / "out"
    place = out / FOLDER[command]
    _users_thing(place, what, tmp_path)
    before = snapshot(tmp_path)
    line = one_error(invoke(*args_of(command, small), "--out", out))
    assert line.startswith(f"error: --out: {place} is a ")
    assert "kvsched did not write" in line and MARKER[command] in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_kvscheds_own_folder_is_replaced_as_before(small, tmp_path, command):
    """A folder the command itself wrote (its marker is there) is replaced; nothing hidden
    is left beside it."""
    out = tmp_path / "out"
    first = invoke(*args_of(command, small), "--out", out)
    assert first.exit_code == 0, first.output
    second = invoke(*args_of(command, small), "--out", out)
    assert second.exit_code == 0, second.output
    assert [p.name for p in out.iterdir()] == [FOLDER[command]]
    if command == "sweep":
        assert "replaced: " in second.stderr and "the previous sweep" in second.stderr
    if command == "capacity":
        assert sorted(p.name for p in (out / "capacity-lab").iterdir()) == [
            "capacity.csv", "capacity.json", "capacity_probes.csv"]


def test_a_run_folder_is_not_a_capacity_folder(small, tmp_path):
    """The markers are per command: a run's folder named capacity-lab is not replaced by
    capacity, nor a capacity folder (capacity --name x) by a run of a scenario named
    capacity-x."""
    out = tmp_path / "out"
    assert invoke("run", small, "--out", out, "--variant", "big",
                  "--set", "name=capacity-lab").exit_code == 0
    assert invoke(*args_of("capacity", small), "--out", out, "--name", "x").exit_code == 0
    before = snapshot(out)
    line = one_error(invoke(*args_of("capacity", small), "--out", out))
    assert f"{out / 'capacity-lab'} is a folder kvsched did not write" in line
    assert "capacity.json" in line
    line = one_error(invoke("run", small, "--out", out, "--variant", "big",
                            "--set", "name=capacity-x"))
    assert f"{out / 'capacity-x'} is a folder kvsched did not write" in line
    assert "<variant>/run.json" in line
    assert snapshot(out) == before


# -- capacity --out: the rules of run -----------------------------------------------------


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """A folder that cannot be written: chmod 555, or as root (whom chmod does not stop)
    os.access made to say so, which is how kvsched checks it."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if (
        Path(p) == folder and mode & os.W_OK) else real_access(p, mode, **kw))
    yield folder


@pytest.mark.parametrize("where", ["file", "under_file", "symlink_loop", "read_only", "proc"])
def test_capacity_out_follows_the_rules_of_run(small, tmp_path, request, where):
    """--out that is a file, under a file, a symbolic link loop, read-only or under /proc:
    capacity says in one line what run says, and writes nothing."""
    if where == "proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"keep me")
    if where == "symlink_loop":
        (tmp_path / "loop").symlink_to("loop")
    out = {"file": blocker, "under_file": blocker / "sub" / "out",
           "symlink_loop": tmp_path / "loop",
           "read_only": request.getfixturevalue("read_only") if where == "read_only" else None,
           "proc": Path("/proc/kvsched-output-safety")}[where]
    before = snapshot(tmp_path)
    line = one_error(invoke(*args_of("capacity", small), "--out", out))
    assert one_error(invoke(*args_of("run", small), "--out", out)) == line
    assert str(out) in line
    assert snapshot(tmp_path) == before
    assert not Path("/proc/kvsched-output-safety").exists()


@pytest.mark.parametrize("previous", [False, True])
def test_capacity_on_a_full_disk_leaves_nothing_partial(small, tmp_path, monkeypatch,
                                                        previous):
    """ENOSPC while writing capacity_probes.csv: one line, no partial capacity.csv (nothing
    under --out), and a previous search of the same name is kept whole."""
    import kvsched.analysis.capacity

    out = tmp_path / "out"
    if previous:
        assert invoke(*args_of("capacity", small), "--out", out).exit_code == 0
    before = snapshot(tmp_path)
    real = kvsched.analysis.capacity.write_csv

    def full(frame, path):
        if path.name == "capacity_probes.csv":
            path.write_text("partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(frame, path)

    monkeypatch.setattr(kvsched.analysis.capacity, "write_csv", full)
    line = one_error(invoke(*args_of("capacity", small), "--out", out))
    assert "No space left on device (disk full)" in line and str(out / "capacity-lab") in line
    if previous:
        assert snapshot(tmp_path) == before
    else:  # (--out itself is made, as by run)
        assert files_under(out) == []


# -- step-time --batches: the input is only read --------------------------------------------


BATCHES = f"{HEADER},note\n1,2048,0,0,0,prefill\n0,0,0,64,1024,decode\n2,512,4096,32,2000,mixed\n"


@pytest.fixture
def batches(tmp_path: Path) -> Path:
    path = tmp_path / "batches.csv"
    path.write_text(BATCHES)
    return path


def test_step_time_prints_the_rows_and_leaves_the_input_alone(batches, tmp_path):
    """Without --out the rows with predicted_ms go to stdout; the input's bytes are the same
    and nothing else is written."""
    result = invoke("step-time", *MODEL, "--batches", batches)
    assert result.exit_code == 0, result.output
    assert batches.read_text() == BATCHES
    assert files_under(tmp_path) == ["batches.csv"]
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == [*HEADER.split(","), "note", "predicted_ms"]
    assert list(frame.note) == ["prefill", "decode", "mixed"] and frame.predicted_ms.gt(0).all()


def test_step_time_out_gets_the_printed_rows_whole(batches, tmp_path):
    """--out FILE holds exactly what stdout would (a previous FILE replaced whole); no
    temporary file is left beside it; the input is unchanged."""
    printed = invoke("step-time", *MODEL, "--batches", batches).stdout
    target = tmp_path / "predicted.csv"
    target.write_text("an older, longer file\n" * 100)
    result = invoke("step-time", *MODEL, "--batches", batches, "--out", target)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {target}: 3 batches, predicted_ms added\n"
    assert target.read_text() == printed
    assert batches.read_text() == BATCHES
    assert files_under(tmp_path) == ["batches.csv", "predicted.csv"]


@pytest.mark.parametrize("how", ["same", "dotted", "hard_link", "symlink"])
def test_step_time_out_never_names_the_input(batches, tmp_path, monkeypatch, how):
    """--out naming the --batches file (by another path, a hard link or a symbolic link):
    one line, the input's bytes unchanged."""
    monkeypatch.chdir(tmp_path)
    if how == "hard_link":
        os.link(batches, tmp_path / "other.csv")
    if how == "symlink":
        (tmp_path / "other.csv").symlink_to(batches)
    target = {"same": batches, "dotted": Path("./sub/../batches.csv"),
              "hard_link": tmp_path / "other.csv", "symlink": tmp_path / "other.csv"}[how]
    (tmp_path / "sub").mkdir()
    before = snapshot(tmp_path)
    line = one_error(invoke("step-time", *MODEL, "--batches", batches, "--out", target))
    assert line.startswith(f"error: --out: {target} is the --batches file")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("body", "message"), [
    ("1,2048,0,0,0,x\n", "row 2: 6 fields, expected 5"),  # shifted a column before
    ("1,2048,0,0,0,7\n0,0,0,64,1024,8\n", "row 2: 6 fields, expected 5"),
    ("1,2048,0,0,0\n1,2048,0,0,0,9\n", "row 3: 6 fields, expected 5"),
    ("1,2048,0,0\n", "row 2: 4 fields, expected 5"),
    ("1,2048,0,0,0\n0,0,0,64\n", "row 3: 4 fields, expected 5"),
    ("1,abc,0,0,0\n", "row 2: prefill_tokens_each must be an integer >= 0, got 'abc'"),
    ("1,2048,0,0,\n", "row 2: mean_kv_context must be an integer >= 0, got ''"),
    ("1,2048,0,0,nan\n", "row 2: mean_kv_context must be an integer >= 0, got 'nan'"),
    ("1,2048,0,-4,0\n", "row 2: num_decode_requests must be an integer >= 0, got '-4'"),
    ("1,2048,0.5,0,0\n", "row 2: prefill_cached_kv_each must be an integer >= 0, got '0.5'"),
])
@pytest.mark.parametrize("with_out", [False, True])
def test_step_time_bad_rows_are_one_line(tmp_path, body, message, with_out):
    """A row with too many or too few fields, or a batch column that is not an integer
    >= 0: one line naming the file, the row and what was expected; exit 2; the input as it
    was and no --out file."""
    path = tmp_path / "b.csv"
    path.write_text(f"{HEADER}\n{body}")
    before = snapshot(tmp_path)
    extra = ["--out", tmp_path / "p.csv"] if with_out else []
    line = one_error(invoke("step-time", *MODEL, "--batches", path, *extra))
    assert line == f"error: {path}: {message}" or line.startswith(f"error: {path}: {message} ")
    assert snapshot(tmp_path) == before


def test_step_time_out_on_a_full_disk_keeps_the_previous_file(batches, tmp_path, monkeypatch):
    """ENOSPC while writing --out: one line, the previous --out file and the input as they
    were, no temporary file left."""
    target = tmp_path / "predicted.csv"
    target.write_bytes(b"previous\n")
    before = snapshot(tmp_path)
    real_replace = os.replace

    def full(src, dst, *args, **kwargs):
        if Path(dst) == target:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    line = one_error(invoke("step-time", *MODEL, "--batches", batches, "--out", target))
    assert line == (f"error: --out: cannot write {target}: No space left on device "
                    "(disk full); nothing was written")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["missing_folder", "a_folder"])
def test_step_time_out_that_cannot_be_a_file(batches, tmp_path, where):
    """--out in a folder that does not exist, or naming a folder: one line, nothing made."""
    target = tmp_path / "nowhere" / "p.csv" if where == "missing_folder" else tmp_path / "dir"
    if where == "a_folder":
        target.mkdir()
    before = snapshot(tmp_path)
    line = one_error(invoke("step-time", *MODEL, "--batches", batches, "--out", target))
    assert line.startswith(f"error: --out: cannot write {target}: ")
    assert snapshot(tmp_path) == before


def test_step_time_header_with_a_column_twice_is_one_line(tmp_path):
    """A batch column named twice in the header: which one holds the batch is unknown."""
    path = tmp_path / "b.csv"
    path.write_text(f"{HEADER},mean_kv_context\n1,2048,0,0,0,5\n")
    before = snapshot(tmp_path)
    line = one_error(invoke("step-time", *MODEL, "--batches", path))
    assert line == f"error: {path}: column 'mean_kv_context' appears twice in the header"
    assert snapshot(tmp_path) == before
