"""`import` and `scrape` into an archive that `budgetscope collect` is writing: through that collector.

Real processes: a `budgetscope collect` on loopback ports, `budgetscope import` and `scrape` run as commands, the
engine's recorded spans sent to the collector over OTLP/HTTP as an exporter sends them, a `/metrics` endpoint
served over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.collector import endpoint
from budgetscope.opener import Archive
from conftest import rows
from test_import_joins import _one_row_a_request, _unpacked

pytestmark = pytest.mark.slow  # a collector and several commands as processes: ~10 s

RUN = "import sys; from budgetscope.cli import main; main(sys.argv[1:])"
TOKEN = "s3cret-token"


class Collect:
    """`budgetscope collect` as a process on free loopback ports."""

    def __init__(self, archive: Path, token: str | None = None):
        env = {**os.environ, "BUDGETSCOPE_COLLECT_TOKEN": token or ""}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RUN, "collect", "--archive", str(archive), "--grpc-port", "0", "--http-port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        banner = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", banner)
        assert found, banner + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{found.group(1)}"
        self.token = token

    def export(self, spans_file: Path) -> None:
        """Each line of an OTLP/JSON lines file as one export request, answered before the next."""
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with httpx.Client(timeout=30) as c:
            for line in spans_file.read_bytes().splitlines():
                r = c.post(f"{self.url}/v1/traces", content=line, headers={"Content-Type": "application/json", **auth})
                assert r.status_code == 200, r.text

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def budgetscope(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A budgetscope command as its own process."""
    return subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_imports_go_through_the_running_collector_in_either_order(tmp_path):
    files = _unpacked(tmp_path)
    archive = tmp_path / "live"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    collect = Collect(archive, token=TOKEN)
    try:
        assert json.loads(endpoint.path_of(archive).read_text()) == {
            "pid": str(collect.proc.pid),
            "url": collect.url,
            "tls_cert": None,
            "auth": True,
        }
        # the collector takes a token: without it, one line and nothing sent
        r = budgetscope("import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive))
        assert (r.returncode, r.stderr) == (
            2,
            f"budgetscope: the collector writing {archive} (pid {collect.proc.pid}) takes a bearer token: give it "
            "with --auth-token-file or $BUDGETSCOPE_COLLECT_TOKEN\n",
        )
        # AIPerf's records before the engine's spans reach the collector
        auth = ["--auth-token-file", str(token_file), "--format", "json"]
        r = budgetscope("import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive), *auth)
        assert r.returncode == 0, r.stderr
        (entry,) = json.loads(r.stdout)["files"]
        assert (
            entry["through_collector"],
            entry["spans"],
            entry["spans_inserted"],
            entry["joined_to_server_rows"],
        ) == (
            str(collect.proc.pid),
            40,
            40,
            0,
        )
        assert len(entry["no_server_row"]) == 40 and "40 of 40 records not joined" in r.stderr
        collect.export(files["spans"])
        # GuideLLM's after them; the AIPerf file again, now that its server rows are there
        r = budgetscope("import", "--from", "guidellm", str(files["guidellm"]), "-a", str(archive), *auth)
        assert r.returncode == 0 and json.loads(r.stdout)["files"][0]["joined_to_server_rows"] == 40, r.stderr
        r = budgetscope("import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive), *auth)
        (entry,) = json.loads(r.stdout)["files"]
        assert (entry["already_imported"], entry["spans_inserted"], entry["joined_to_server_rows"]) == (True, 0, 40)
        _one_row_a_request(archive)  # read while the collector writes
        # the batches name the files they came from
        assert rows(archive, "SELECT origin FROM ingest_batches WHERE origin LIKE '%.json%' ORDER BY 1") == [
            (str(files["aiperf"]),),
            (str(files["guidellm"]),),
        ]
        collect.stop()
        assert not endpoint.path_of(archive).exists()
    finally:
        collect.kill()
    _one_row_a_request(archive)


class _Metrics(BaseHTTPRequestHandler):
    body = b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 3\nvllm:x 1\n'

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_scrape_and_a_metrics_import_go_through_the_running_collector(tmp_path):
    archive = tmp_path / "live"
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    saved = tmp_path / "metrics.txt"
    saved.write_bytes(_Metrics.body)
    collect = Collect(archive)
    try:
        r = budgetscope("scrape", url, "-a", str(archive), "--count", "2", "--every", "100ms", "--format", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) | {"urls": None} == {
            "archive": str(archive),
            "scrapes": 2,
            "urls": None,
            "samples": 4,
            "failed": 0,
        }
        r = budgetscope(
            "import", "--from", "prometheus", str(saved), "-a", str(archive), "--start", "1700000000000000000"
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"{saved}: 2 samples\n"
        r = budgetscope(
            "import", "--from", "prometheus", str(saved), "-a", str(archive), "--start", "1700000000000000000"
        )
        assert r.stdout == f"{saved}: 0 samples (already imported, or empty)\n"
        collect.stop()
    finally:
        collect.kill()
        server.shutdown()
    assert rows(
        archive,
        "SELECT instance, metric, count(*), sum(value) FROM server_metrics GROUP BY ALL ORDER BY 1, 2",
    ) == [
        (str(saved), "vllm:num_requests_waiting", 1, 3.0),
        (str(saved), "vllm:x", 1, 1.0),
        (url, "vllm:num_requests_waiting", 2, 6.0),
        (url, "vllm:x", 2, 2.0),
    ]


def test_an_archive_another_command_writes_is_still_one_line(tmp_path, archive_path):
    files = _unpacked(tmp_path)
    with Archive(archive_path):  # an `ingest` holds it, no collector: nothing to send through
        r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive_path)])
    assert r.exit_code == 2
    assert r.stderr == (
        f"budgetscope: {archive_path} is being written by another process (pid {os.getpid()}); an archive has one "
        "writer, and readers need no lock\n"
    )


def test_a_collector_that_died_leaves_its_archive_to_the_next_writer(tmp_path):
    files = _unpacked(tmp_path)
    archive = tmp_path / "live"
    collect = Collect(archive)
    collect.proc.kill()  # kill -9: its endpoint file stays, naming a process that no longer holds the lock
    collect.proc.wait()
    assert endpoint.path_of(archive).exists()
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(files["aiperf"]), "-a", str(archive)])
    assert r.exit_code == 0 and "through the collector" not in r.stdout, r.output
    assert rows(archive, "SELECT count(*) FROM requests") == [(40,)]
