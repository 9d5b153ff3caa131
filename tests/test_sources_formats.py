"""A file given to the wrong command or the wrong `import --from` gets one line naming what it is."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetscope.cli import main
from budgetscope.sources.formats import recognise_head

FIXTURES = Path(__file__).parent / "fixtures" / "tools"


@pytest.mark.parametrize(
    "head, kind",
    [
        (gzip.decompress((FIXTURES / "aiperf-profile_export.jsonl.gz").read_bytes())[:65536], "aiperf"),
        (gzip.decompress((FIXTURES / "aiperf-raw-profile_export_raw.jsonl.gz").read_bytes())[:65536], "aiperf-raw"),
        ((FIXTURES / "aiperf-profile_export_aiperf.json").read_bytes()[:65536], "aiperf-summary"),
        (gzip.decompress((FIXTURES / "guidellm-benchmarks.json.gz").read_bytes())[:65536], "guidellm"),
        (gzip.decompress((FIXTURES / "engine-spans.jsonl.gz").read_bytes())[:65536], "otlp"),
        (b'{\n  "resourceSpans": [\n', "otlp"),
        (b'{"date": "20260101-000000", "endpoint_type": "openai", "model_id": "m", "tokenizer_id": "m"', "vllm-bench"),
        (b'{"request_id": "0", "metrics": {"arrival_time": 1.0}}\n', "vllm-metrics"),
        (b'[{"id": 1, "model_name": "m", "timestamps": [{"name": "HTTP_RECV_START", "ns": 1}]}]', "triton"),
        (b"# HELP vllm:num_requests_waiting Waiting.\n# TYPE vllm:num_requests_waiting gauge\n", "prometheus"),
        (b"\x0a\x8f\x02\x0a\x1c", None),  # protobuf
        (b'{"something": "else"}\n', None),
    ],
)
def test_known_formats_are_recognised_from_their_head(head, kind):
    assert recognise_head(head) == kind


def _aiperf_file(tmp_path) -> Path:
    f = tmp_path / "profile_export.jsonl"
    f.write_bytes(gzip.decompress((FIXTURES / "aiperf-profile_export.jsonl.gz").read_bytes()))
    return f


def test_import_from_the_wrong_tool_says_which_it_is(tmp_path, archive_path):
    f = _aiperf_file(tmp_path)
    r = CliRunner().invoke(main, ["import", "--from", "guidellm", str(f), "-a", str(archive_path)])
    assert r.exit_code == 2
    assert r.stderr == (
        f"budgetscope: {f}: this is an AIPerf profile_export.jsonl, not a GuideLLM benchmarks.json: "
        "read it with `budgetscope import --from aiperf` (nothing from it landed)\n"
    )
    assert not archive_path.exists()


def test_ingest_of_a_tools_results_is_one_line(tmp_path, archive_path):
    f = _aiperf_file(tmp_path)
    spans = tmp_path / "spans.jsonl"
    spans.write_bytes(gzip.decompress((FIXTURES / "engine-spans.jsonl.gz").read_bytes()))
    r = CliRunner().invoke(main, ["ingest", str(f), str(spans), "-a", str(archive_path), "--format", "json"])
    assert r.exit_code == 2
    assert r.stderr == (
        f"budgetscope: {f}: this is an AIPerf profile_export.jsonl, not an OTLP trace export: "
        "read it with `budgetscope import --from aiperf` (nothing from it landed)\n"
    )
    out = json.loads(r.stdout)
    # the spans beside it still landed (the recorded run's 1,830 spans, 80 requests); nothing of the AIPerf file did
    assert (out["counts"]["spans"], out["counts"]["requests"]) == (1830, 80)
    assert [e["rejected"] for e in out["files"]][0].startswith(f"{f}: this is an AIPerf")


def test_ingest_or_a_wrong_import_of_aiperfs_raw_export_is_one_line(tmp_path, archive_path):
    raw = tmp_path / "profile_export_raw.jsonl"
    raw.write_bytes(gzip.decompress((FIXTURES / "aiperf-raw-profile_export_raw.jsonl.gz").read_bytes()))
    said = (
        f"budgetscope: {raw}: this is an AIPerf raw export (profile_export_raw.jsonl), not {{}}: read it with "
        "`budgetscope import --from aiperf` of the profile_export.jsonl beside it (nothing from it landed)\n"
    )
    r = CliRunner().invoke(main, ["ingest", str(raw), "-a", str(archive_path)])
    assert (r.exit_code, r.stderr) == (2, said.format("an OTLP trace export"))
    r = CliRunner().invoke(main, ["import", "--from", "guidellm", str(raw), "-a", str(archive_path)])
    assert (r.exit_code, r.stderr) == (2, said.format("a GuideLLM benchmarks.json"))
    assert not archive_path.exists()


def test_aiperfs_run_summary_given_to_import_says_what_it_is_and_which_file_to_give(tmp_path, archive_path):
    summary = tmp_path / "profile_export_aiperf.json"
    summary.write_bytes((FIXTURES / "aiperf-profile_export_aiperf.json").read_bytes())
    said = (
        f"budgetscope: {summary}: this is an AIPerf run summary (profile_export_aiperf.json), not {{}}: read it with "
        "`budgetscope import --from aiperf` of the profile_export.jsonl beside it (the per-request records; the "
        "summary is read from beside them for the run's model) (nothing from it landed)\n"
    )
    r = CliRunner().invoke(main, ["import", "--from", "aiperf", str(summary), "-a", str(archive_path)])
    assert (r.exit_code, r.stderr) == (2, said.format("an AIPerf profile_export.jsonl"))
    r = CliRunner().invoke(main, ["ingest", str(summary), "-a", str(archive_path)])
    assert (r.exit_code, r.stderr) == (2, said.format("an OTLP trace export"))
    assert not archive_path.exists()
