"""`--format json` summaries of `ingest`, `import`, `scrape` and `collect` (as `report`, `query` and `load` have),
and a rejected file leaves no empty archive behind."""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.commands.scrape import scrape
from conftest import rows
from test_collector_cli import JSON_DOC, RUN_COLLECT


@pytest.fixture
def not_otlp(tmp_path):
    f = tmp_path / "nototlp.json"
    f.write_text('{"hello": 1}\n')
    return f


@pytest.fixture
def otlp(tmp_path):
    f = tmp_path / "traces.json"
    f.write_bytes(JSON_DOC)
    return f


@pytest.mark.parametrize("name", ["t", "t.duckdb"])
def test_a_rejected_file_leaves_no_archive_behind(tmp_path, not_otlp, name):
    archive = tmp_path / name
    r = CliRunner().invoke(main, ["ingest", str(not_otlp), "-a", str(archive)])
    assert r.exit_code == 2 and "not an OTLP trace export" in r.stderr
    assert not archive.exists() and not (tmp_path / f"{name}.wal").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nototlp.json"]
    assert r.stdout.endswith(f"{archive}: nothing landed; not created\n")


def test_an_empty_folder_given_as_archive_stays_empty(tmp_path, not_otlp):
    archive = tmp_path / "t"
    archive.mkdir()
    r = CliRunner().invoke(main, ["ingest", str(not_otlp), "-a", str(archive)])
    assert r.exit_code == 2 and archive.is_dir() and not any(archive.iterdir())


@pytest.mark.parametrize("name", ["t", "t.duckdb"])
def test_a_rejected_file_leaves_an_existing_archive_as_it_was(tmp_path, not_otlp, otlp, name):
    archive = tmp_path / name
    assert CliRunner().invoke(main, ["ingest", str(otlp), "-a", str(archive)]).exit_code == 0
    r = CliRunner().invoke(main, ["ingest", str(not_otlp), "-a", str(archive)])
    assert r.exit_code == 2 and rows(archive, "SELECT count(*) FROM spans") == [(2,)]


def test_an_import_with_nothing_landed_leaves_no_archive(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("{ not json")
    r = CliRunner().invoke(main, ["import", "--from", "vllm-bench", str(f), "-a", str(tmp_path / "runs")])
    assert r.exit_code == 2 and not (tmp_path / "runs").exists()


def test_ingest_format_json(tmp_path, otlp, not_otlp):
    archive = tmp_path / "a"
    r = CliRunner().invoke(main, ["ingest", str(otlp), str(not_otlp), "-a", str(archive), "--format", "json"])
    assert r.exit_code == 2  # one file rejected: still one JSON document on stdout, the line on stderr
    doc = json.loads(r.stdout)
    assert doc["archive"] == str(archive) and doc["kept"] is True
    assert doc["counts"] == {"spans": 2, "requests": 1, "ingest_batches": 1, "gpu_samples": 0}
    first, second = doc["files"]
    assert (first["file"], first["spans_inserted"], first["requests_derived"], first["rejected"]) == (
        str(otlp),
        2,
        1,
        [],
    )
    assert second["spans"] == 0 and "not an OTLP trace export" in second["rejected"][0]
    assert "not an OTLP trace export" in r.stderr


def test_import_format_json_with_from_or_a_second_format(tmp_path):
    f = tmp_path / "metrics.txt"
    f.write_text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n")
    archive = tmp_path / "runs"
    for args in (["--from", "prometheus", "--format", "json"], ["--format", "prometheus", "--format", "json"]):
        r = CliRunner().invoke(main, ["import", *args, str(f), "-a", str(archive), "--start", "1700000000000000000"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["format"] == "prometheus" and doc["kept"] is True and doc["files"][0]["file"] == str(f)
    assert [json.loads(r.stdout)["files"][0]["samples"]] == [0]  # the second time: already imported
    r = CliRunner().invoke(main, ["import", "--format", "json", str(f), "-a", str(archive)])
    assert r.exit_code == 2 and r.stderr.startswith("budgetscope: say what the files are: --from")
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", "--format", "triton", str(f), "-a", str(archive)])
    assert r.exit_code == 2 and "one kind, not aiperf and triton" in r.stderr
    # the plain form is as it was
    r = CliRunner().invoke(main, ["import", "--format", "prometheus", str(f), "-a", str(archive)])
    assert r.exit_code == 0 and re.fullmatch(rf"{re.escape(str(f))}: \d+ samples\n", r.stdout)


def test_scrape_format_json(tmp_path):
    body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        r = CliRunner().invoke(
            scrape, [url, "-a", str(tmp_path / "m"), "--count", "2", "--every", "10ms", "--format", "json"]
        )
    finally:
        server.shutdown()
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {
        "archive": str(tmp_path / "m"),
        "scrapes": 2,
        "urls": [url],
        "samples": 2,
        "failed": 0,
    }


def test_collect_format_json_summary(archive_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUN_COLLECT,
            "--archive",
            str(archive_path),
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = proc.stderr.readline()  # the banner goes to stderr: stdout holds the JSON document alone
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", banner).group(1))
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces",
            content=JSON_DOC,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["archive"] == str(archive_path) and doc["error"] is None
    assert len(doc["endpoints"]) == 2
    stats = doc["stats"]
    assert (stats["batches"], stats["batches_landed"], stats["spans"], stats["requests_derived"]) == (1, 1, 2, 1)
