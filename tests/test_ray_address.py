"""A Ray address where no Ray cluster answers fails in one line within seconds (Ray itself
retries such an address for minutes), for sweep and capacity, before anything runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched import backends
from kvsched.backends import check_address
from kvsched.cli import app
from kvsched.errors import KvschedError

pytest.importorskip("ray")

WAIT = "RAY_gcs_server_port_wait_time_s"  # Ray's name for its seconds of tries

SCENARIO = """\
name: small
engine: {max_num_batched_tokens: 512, num_blocks: 200}
time: {kind: steps}
workload: {kind: synthetic, num_requests: 20, arrival: {kind: poisson, rate: 0.5},
           prompt_len: 40, output_len: 8}
"""


def closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def not_ray():
    """A local TCP server that accepts every connection and answers nothing Ray reads."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        held = []
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            connection.sendall(b"HTTP/1.1 404 Not Found\r\n\r\n")
            held.append(connection)
        for connection in held:
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("command", [["sweep", "--budget", "128,256"],
                                     ["capacity", "--slo", "ttft_p99=50"]])
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_nothing_listening_is_one_line_at_once(command, scheme, tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    address = f"{scheme}127.0.0.1:{closed_port()}"
    began = time.monotonic()
    result = CliRunner().invoke(app, [command[0], str(tmp_path / "s.yaml"), *command[1:],
                                      "--backend", "ray", "--address", address,
                                      "--out", str(tmp_path / "o")])
    assert time.monotonic() - began < backends.REACH_TIMEOUT + 5
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --address: cannot reach a Ray cluster at {address}")
    assert not (tmp_path / "o").exists()


def test_a_server_that_is_not_ray_fails_in_seconds(not_ray, tmp_path):
    """The port answers, so only a Ray client can tell: its handshake is given seconds, in
    a process of its own (Ray's first attempt waits over a minute); one line, exit 2."""
    (tmp_path / "s.yaml").write_text(SCENARIO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvsched", "sweep", str(tmp_path / "s.yaml"),
                           "--budget", "128,256", "--backend", "ray", "--address",
                           f"127.0.0.1:{not_ray}", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: --address: 127.0.0.1:{not_ray} accepts connections "
                               "but does not answer as a Ray cluster's head")
    assert took < 30, took
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("address", ["nonsense", "host:", ":6379", "host:port", "h:70000"])
def test_an_address_that_is_not_host_port_is_named(address):
    with pytest.raises(KvschedError, match="--address: expected HOST:PORT"):
        check_address(address)


def test_ray_address_from_the_environment_is_checked_too(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    with pytest.raises(KvschedError, match="^RAY_ADDRESS: cannot reach"):
        check_address(None)
    for left_to_ray in ("auto", "local"):
        monkeypatch.setenv("RAY_ADDRESS", left_to_ray)
        check_address(None)
    monkeypatch.delenv("RAY_ADDRESS")
    check_address(None)


def test_address_without_backend_ray_is_refused_before_loading(tmp_path):
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "missing.yaml"), "--budget",
                                      "128", "--address", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --address needs --backend ray"


def test_a_connection_made_shows_what_ray_said(capfd):
    """What Ray writes on stderr while it connects is held back, and shown once connected
    (a version warning, say); dropped when the connection fails."""
    with backends._connecting("127.0.0.1:1"):
        assert os.environ[WAIT] == str(backends.CONNECT_TRIES)
        os.write(2, b"from ray's logger\n")
    assert WAIT not in os.environ
    assert capfd.readouterr().err == "from ray's logger\n"
    with pytest.raises(ConnectionError), backends._connecting("127.0.0.1:1"):
        os.write(2, b"retrying\n")
        raise ConnectionError("no")
    assert capfd.readouterr().err == ""


def test_started_here_ray_is_not_touched(monkeypatch):
    """No address: a local Ray is started, Ray's settings and stderr as they are."""
    monkeypatch.delenv(WAIT, raising=False)
    with backends._connecting(None):
        assert WAIT not in os.environ


def test_readme_and_help_say_so():
    repo = Path(__file__).resolve().parent.parent
    readme = (repo / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "fails in one line within seconds" in " ".join(readme.split())
