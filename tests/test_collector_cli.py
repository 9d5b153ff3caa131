"""`budgetscope collect`: a real process on free ports, SIGTERM, the summary; start-up errors exit 2."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from budgetscope.archive.errors import ArchiveError
from budgetscope.commands.collect import collect
from budgetscope.opener import Archive
from conftest import rows

RUN_COLLECT = "import sys; from budgetscope.commands.collect import collect; collect(sys.argv[1:])"
JSON_DOC = (
    b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},'
    b'"scopeSpans":[{"scope":{"name":"budgetscope"},"spans":['
    b'{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"llm.request",'
    b'"kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001000000000",'
    b'"attributes":[{"key":"budgetscope.tier","value":{"stringValue":"interactive"}}]},'
    b'{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"c7ad6b7169203332",'
    b'"parentSpanId":"b7ad6b7169203331","name":"stage.queue","kind":1,'
    b'"startTimeUnixNano":"1700000000100000000","endTimeUnixNano":"1700000000300000000",'
    b'"attributes":[{"key":"budgetscope.stage","value":{"stringValue":"queue"}}]}]}]}]}'
)


def test_collect_runs_until_sigterm_and_prints_a_summary(archive_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_COLLECT, "--archive", str(archive_path), "--grpc-port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = proc.stdout.readline()
        assert re.match(
            r"budgetscope collect: OTLP/gRPC 127\.0\.0\.1:\d+, OTLP/HTTP http://127\.0\.0\.1:\d+/v1/traces;", banner
        ), banner
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", banner).group(1))
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces",
            content=JSON_DOC,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert (r.status_code, r.content) == (200, b"{}")
        with Archive(archive_path, read_only=True, create=False) as r:  # a folder archive: read while it writes
            assert r.con.execute("SELECT count(*) FROM spans").fetchall()[0][0] in (0, 2)
        with pytest.raises(ArchiveError, match="is being written by another process"):  # one writer
            Archive(archive_path)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].startswith(
        "budgetscope collect: 1 batches (1 landed, 0 already stored, 0 rejected, 0 failed), 2 spans, 1 requests derived"
    )
    assert rows(archive_path, "SELECT tier, queue_ms FROM requests") == [("interactive", 200.0)]


@pytest.mark.parametrize(
    "receiver, flags",
    [("HTTP", ["--http-port", "{port}", "--no-grpc"]), ("gRPC", ["--grpc-port", "{port}", "--no-http"])],
)
def test_a_port_in_use_exits_2_with_one_line(archive_path, receiver, flags):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(collect, ["--archive", str(archive_path), *(f.format(port=port) for f in flags)])
    assert result.exit_code == 2
    assert result.output == (
        f"budgetscope: OTLP/{receiver}: cannot listen on 127.0.0.1:{port} "
        "(Address already in use: another process listens on it)\n"
    )
    assert not archive_path.exists()  # found before the archive was created


@pytest.mark.parametrize(
    "host, reason",
    [
        ("0", "not an address as written (0.0.0.0 listens on every interface, 127.0.0.1 on this machine only)"),
        ("127.1", "not an address as written (0.0.0.0 listens on every interface, 127.0.0.1 on this machine only)"),
        ("no-such-host.invalid", "the name lookup failed ("),
    ],
)
def test_a_host_that_names_no_address_is_one_line_and_creates_nothing(archive_path, host, reason):
    result = CliRunner().invoke(
        collect, ["--archive", str(archive_path), "--host", host, "--grpc-port", "0", "--http-port", "0"]
    )
    assert result.exit_code == 2
    assert result.output.startswith(f"budgetscope: cannot listen on {host}: {reason}"), result.output
    assert len(result.output.splitlines()) == 1 and not archive_path.exists()


def test_bind_failures_say_what_they_are():
    import errno
    import os

    from budgetscope.collector.listen import bind_failure

    def failure(code: int) -> str:
        return bind_failure(OSError(code, os.strerror(code)))

    assert failure(errno.EACCES) == "Permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE"
    assert failure(errno.EADDRNOTAVAIL) == "Cannot assign requested address: not an address of this machine"
    assert failure(errno.EADDRINUSE) == "Address already in use: another process listens on it"


def test_a_bad_archive_path_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(
        collect, ["--archive", str(tmp_path / "missing" / "a.duckdb"), "--grpc-port", "0", "--http-port", "0"]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"budgetscope: cannot create {tmp_path / 'missing' / 'a.duckdb'}: "
        f"folder {tmp_path / 'missing'} does not exist\n"
    )


@pytest.mark.parametrize("flag", ["--max-pending-mb", "--max-unlanded-mb"])
def test_a_memory_limit_below_1_mb_exits_2_and_creates_nothing(archive_path, flag):
    result = CliRunner().invoke(collect, ["--archive", str(archive_path), flag, "0.5", "--http-port", "0"])
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}': 0.5 is not in the range x>=1." in result.output
    assert not archive_path.exists()


def test_an_unlanded_span_limit_below_1_exits_2_and_creates_nothing(archive_path):
    result = CliRunner().invoke(
        collect, ["--archive", str(archive_path), "--max-unlanded-spans", "0", "--http-port", "0"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--max-unlanded-spans': 0 is not in the range x>=1." in result.output
    assert not archive_path.exists()


def test_collect_has_help_with_an_example():
    result = CliRunner().invoke(collect, ["--help"])
    assert result.exit_code == 0
    assert "budgetscope collect --archive prod/" in result.output
