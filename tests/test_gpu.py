"""GPU sampler, OTLP metrics ingest and the GPU tail analysis — on a fake NVML (`fake_pynvml`), no GPU needed."""

from __future__ import annotations

import types

import orjson
import pytest

from budgetscope.analysis.gpu import NO_DRAM_BANDWIDTH, NO_GPU_SAMPLES, classify, window_figures
from budgetscope.archive.spool import RawBatch
from budgetscope.instrument import gpu
from budgetscope.instrument.gpu import GpuSampler, Point, otlp_json, peak_bandwidth_bytes_per_s, power_watts
from budgetscope.opener import Archive

UUID = "GPU-00000000-1111-2222-3333-444444444444"


# -- a fake NVML: the pynvml names the sampler uses, with scripted answers ------------------------------------
class NVMLError(Exception):
    def __init__(self, value):
        super().__init__({3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}[value])
        self.value = value


def fake_pynvml(*, count=1, mig=False, gpm=True, init_error=None, energy_mj=None, util_error=False):
    """A module object standing in for pynvml: an 'H100' (2619 MHz × 5120 bit) unless told otherwise."""
    nv = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_SUCCESS=0,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_DRIVER_NOT_LOADED=9,
        NVML_ERROR_LIBRARY_NOT_FOUND=12,
        NVML_ERROR_NO_PERMISSION=4,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlMemory_v2=0x02000028,
        NVML_GPM_METRICS_GET_VERSION=1,
        NVML_GPM_METRIC_DRAM_BW_UTIL=10,
        NVML_GPM_METRIC_SM_OCCUPANCY=3,
        freed=[],
        shutdown=[],
    )
    energy = iter(energy_mj or range(0, 10**9, 50_000))

    def init():
        if init_error:
            raise NVMLError(init_error)

    def not_supported(*_):
        raise NVMLError(3)

    def util(h):
        if util_error:
            raise NVMLError(3)
        return types.SimpleNamespace(gpu=87, memory=41)

    def metrics_get(mg):
        mg.metrics[0].value, mg.metrics[0].nvmlReturn = 62.5, 0
        mg.metrics[1].value, mg.metrics[1].nvmlReturn = 30.0, 3  # occupancy refused: left out
        return mg

    def metrics_struct():
        return types.SimpleNamespace(
            metrics=[types.SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(2)]
        )

    nv.__dict__.update(
        nvmlInit=init,
        nvmlShutdown=lambda: nv.shutdown.append(1),
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: UUID[:-1] + str(h),
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMigMode=lambda h: [1 if mig else 0, 0],
        nvmlDeviceGetMaxClockInfo=lambda h, t: 2619 if t == 2 else 1980,
        nvmlDeviceGetClockInfo=lambda h, t: 2619 if t == 2 else 1755,
        nvmlDeviceGetMemoryBusWidth=lambda h: 5120,
        nvmlDeviceGetMemoryInfo=lambda h, version=None: types.SimpleNamespace(used=60 << 30, total=80 << 30),
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy),
        nvmlGpmQueryDeviceSupport=(lambda h: types.SimpleNamespace(isSupportedDevice=1))
        if gpm
        else (lambda h: types.SimpleNamespace(isSupportedDevice=0)),
        nvmlGpmSampleAlloc=lambda: object(),
        nvmlGpmSampleGet=lambda h, s: s,
        nvmlGpmSampleFree=lambda s: nv.freed.append(s),
        nvmlGpmMetricsGet=metrics_get,
        c_nvmlGpmMetricsGet_t=metrics_struct,
    )
    if mig:
        nv.nvmlDeviceGetUtilizationRates = not_supported
    return nv


class ListSink:
    def __init__(self):
        self.points, self.closed = [], False

    def export(self, points, host_name):
        self.points += points

    def close(self):
        self.closed = True


def _run(nv, ticks=3) -> tuple[GpuSampler, ListSink]:
    sink = ListSink()
    s = GpuSampler(every_s=0.02, sink=sink, nvml=nv, host_name="node-1", flush_every_s=0.0, power_every_s=0.0)
    s.run(max_ticks=ticks)
    return s, sink


# -- conversions ------------------------------------------------------------------------------------------------
def test_peak_bandwidth_from_memory_clock_and_bus_width():
    assert peak_bandwidth_bytes_per_s(2619, 5120) == pytest.approx(3.352e12, rel=1e-3)  # H100 SXM
    assert peak_bandwidth_bytes_per_s(1215, 5120) == pytest.approx(1.555e12, rel=1e-3)  # A100 40 GB


def test_power_from_energy_counter_deltas():
    assert power_watts(1_000_000, 0, 1_070_000, 100_000_000) == pytest.approx(700.0)  # 70 J in 0.1 s
    assert power_watts(5, 10, 4, 20) is None  # counter reset: unknown, not negative
    assert power_watts(5, 10, 9, 10) is None


# -- the sampler on the fake NVML ---------------------------------------------------------------------------------
def test_sampler_reads_every_figure_with_units_and_own_timestamps():
    s, sink = _run(fake_pynvml(), ticks=3)
    assert s.unavailable is None and sink.closed and s.num_ticks >= 2
    by = {}
    for p in sink.points:
        by.setdefault(p.metric, []).append(p)
    assert by[gpu.HBM_USED][0].value == 60 << 30 and by[gpu.HBM_LIMIT][0].value == 80 << 30
    assert by[gpu.GPU_UTILIZATION][0].value == pytest.approx(0.87)
    assert by[gpu.MEMORY_ACTIVITY][0].value == pytest.approx(0.41)
    assert by[gpu.DRAM_BANDWIDTH][0].value == pytest.approx(0.625)
    assert gpu.SM_OCCUPANCY not in by  # NVML refused it for that interval: not emitted
    assert by[gpu.SM_CLOCK][0].value == 1755e6 and by[gpu.MEMORY_CLOCK][0].value == 2619e6
    assert by[gpu.PEAK_BANDWIDTH][0].value == pytest.approx(3.352e12, rel=1e-3)
    assert len(by[gpu.POWER]) == s.num_ticks - 1  # the first energy reading only opens the first interval
    assert all(p.value > 0 for p in by[gpu.POWER])
    assert len({p.ts_ns for p in sink.points}) > 1 and all(p.ts_ns > 1.6e18 for p in sink.points)
    assert {p.gpu_uuid for p in sink.points} == {UUID[:-1] + "0"}


def test_mig_names_what_is_unknown_and_never_emits_it():
    s, sink = _run(fake_pynvml(mig=True))
    assert s.unavailable.startswith("GPU figures unknown: GPU 0 (NVIDIA H100 80GB HBM3) is in MIG mode")
    metrics = {p.metric for p in sink.points}
    assert metrics.isdisjoint({gpu.GPU_UTILIZATION, gpu.MEMORY_ACTIVITY, gpu.DRAM_BANDWIDTH, gpu.SM_OCCUPANCY})
    assert gpu.HBM_USED in metrics


def test_no_gpm_names_bandwidth_unknown_but_keeps_activity():
    s, sink = _run(fake_pynvml(gpm=False))
    assert "no GPM (needs Hopper or newer" in s.unavailable and "\n" not in s.unavailable
    metrics = {p.metric for p in sink.points}
    assert gpu.DRAM_BANDWIDTH not in metrics and gpu.MEMORY_ACTIVITY in metrics


def test_a_call_that_fails_stops_that_metric_only():
    _, sink = _run(fake_pynvml(util_error=True))
    metrics = {p.metric for p in sink.points}
    assert gpu.GPU_UTILIZATION not in metrics and gpu.MEMORY_ACTIVITY not in metrics and gpu.HBM_USED in metrics


@pytest.mark.parametrize("err,why", [(12, "NVML library (libnvidia-ml.so) is not found"), (9, "driver is not loaded")])
def test_no_driver_is_one_line(err, why):
    s = GpuSampler(sink=ListSink(), nvml=fake_pynvml(init_error=err))
    assert s.open() is False and why in s.unavailable and "\n" not in s.unavailable


def test_no_gpu_is_one_line():
    s = GpuSampler(sink=ListSink(), nvml=fake_pynvml(count=0))
    assert not s.start() and s.unavailable == (
        "GPU sampling unavailable: NVML started but found no GPU; no GPU figures are recorded"
    )


def test_real_pynvml_on_this_machine_gives_the_one_line(runner_real_nvml_absent):
    s = GpuSampler(sink=ListSink())
    assert s.open() is False
    assert s.unavailable == (
        "GPU sampling unavailable: NVML cannot start (the NVML library (libnvidia-ml.so) is not "
        "found: no NVIDIA driver on this machine); no GPU figures are recorded"
    )


@pytest.fixture
def runner_real_nvml_absent():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return
    pynvml.nvmlShutdown()
    pytest.skip("this machine has an NVIDIA driver")


def test_cli_without_gpu_prints_the_line_and_exits_2(runner_real_nvml_absent, tmp_path):
    from click.testing import CliRunner

    from budgetscope.cli import main

    r = CliRunner().invoke(main, ["gpu", "sample", "--out", f"jsonl:{tmp_path / 'g.jsonl'}"])
    assert r.exit_code == 2 and r.stderr.startswith("budgetscope: GPU sampling unavailable: NVML cannot start")
    assert r.stderr.count("\n") == 1


@pytest.mark.gpu
def test_real_gpu_sampling(tmp_path):
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pytest.skip("no NVIDIA GPU / driver here")
    pynvml.nvmlShutdown()
    sink = ListSink()
    s = GpuSampler(every_s=0.1, sink=sink, flush_every_s=0.0)
    s.run(max_ticks=5)
    assert any(p.metric == gpu.HBM_USED for p in sink.points)


# -- OTLP metrics into the archive --------------------------------------------------------------------------------
def _points(t0=1_700_000_000_000_000_000, n=3, step=100_000_000, **values):
    out = []
    for k in range(n):
        for m, v in values.items():
            out.append(Point(t0 + k * step, m, v, UUID, 0))
    return out


def _proto(doc: dict) -> bytes:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    return ParseDict(doc, ExportMetricsServiceRequest()).SerializeToString()


def test_metrics_json_and_proto_land_once_in_gpu_samples(tmp_path):
    doc = otlp_json(_points(**{gpu.HBM_USED: 1e9, gpu.DRAM_BANDWIDTH: 0.5}), "node-1")
    raw = orjson.dumps(doc)
    with Archive(tmp_path / "a.duckdb") as a:
        r = a.ingest([RawBatch(raw, "otlp-metrics-json", "f", "line 1")])
        assert r.batches_landed == 1 and r.gpu_points == 6 and r.gpu_points_inserted == 6 and not r.rejected
        r = a.ingest([RawBatch(raw, "otlp-metrics-json", "f", "line 1")])
        assert r.batches_already_ingested == 1
        r = a.ingest([RawBatch(_proto(doc), "otlp-metrics-proto", "g", "document")])  # same points, new bytes
        assert r.batches_landed == 1 and r.gpu_points == 6 and r.gpu_points_inserted == 0
        rows = a.con.execute(
            "SELECT ts_ns, host_name, gpu_uuid, gpu_index, metric, value, unit FROM gpu_samples "
            "ORDER BY metric, ts_ns LIMIT 1"
        ).fetchall()
        assert rows == [(1_700_000_000_000_000_000, "node-1", UUID, 0, gpu.DRAM_BANDWIDTH, 0.5, "1")]
        assert a.con.execute("SELECT format, span_count FROM ingest_batches ORDER BY batch_id").fetchall() == [
            ("otlp-metrics-json", 0),
            ("otlp-metrics-proto", 0),
        ]


def test_bad_metrics_batch_lands_not_at_all(tmp_path):
    good = otlp_json(_points(**{gpu.HBM_USED: 1e9}), "node-1")
    bad = orjson.loads(orjson.dumps(good))
    bad["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][2].pop("timeUnixNano")
    with Archive(tmp_path / "a.duckdb") as a:
        r = a.ingest(
            [
                RawBatch(orjson.dumps(bad), "otlp-metrics-json", "f", "line 1"),
                RawBatch(b'{"hello": 1}', "otlp-metrics-json", "f", "line 2"),
                RawBatch(b"\xff\xff not proto", "otlp-metrics-proto", "f", "line 3"),
            ]
        )
        assert [str(x) for x in r.rejected] == [
            "f: line 1: metric 'hw.gpu.memory.usage' point 2: no timeUnixNano",
            "f: line 2: not an OTLP metrics export: no 'resourceMetrics' list (found keys ['hello'])",
            r.rejected[2].__str__(),
        ]
        assert r.rejected[2].error.startswith("not an OTLP protobuf metrics export")
        assert a.counts()["gpu_samples"] == 0 and a.counts()["ingest_batches"] == 0


def test_ingest_cli_detects_metrics_files(tmp_path):
    from click.testing import CliRunner

    from budgetscope.cli import main

    path = tmp_path / "gpu.jsonl"
    sink = gpu.JsonLinesSink(str(path))
    sink.export(_points(**{gpu.HBM_USED: 1e9}), "node-1")
    sink.export(_points(t0=1_700_000_001_000_000_000, **{gpu.HBM_USED: 2e9}), "node-1")
    sink.close()
    pb = tmp_path / "gpu.pb"
    pb.write_bytes(_proto(otlp_json(_points(t0=1_700_000_002_000_000_000, **{gpu.POWER: 300.0}), "node-1")))
    r = CliRunner().invoke(main, ["ingest", str(path), str(pb), "--archive", str(tmp_path / "a.duckdb")])
    assert r.exit_code == 0, r.output
    with Archive(tmp_path / "a.duckdb", read_only=True) as a:
        assert a.con.execute("SELECT metric, count(*) FROM gpu_samples GROUP BY 1 ORDER BY 1").fetchall() == [
            (gpu.HBM_USED, 6),
            (gpu.POWER, 3),
        ]


def test_collector_metrics_endpoint(tmp_path):
    import httpx

    from budgetscope.collector import Collector

    doc = otlp_json(_points(**{gpu.HBM_USED: 1e9}), "node-1")
    with Collector(tmp_path / "a.duckdb", grpc_port=0, http_port=0, metrics=True) as c:
        r = httpx.post(
            f"http://127.0.0.1:{c.http_port}/v1/metrics",
            content=orjson.dumps(doc),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 200
        r = httpx.post(
            f"http://127.0.0.1:{c.http_port}/v1/metrics",
            content=b'{"resourceSpans": []}',
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 400
        import grpc

        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            export = ch.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
            export(_proto(otlp_json(_points(t0=1_800_000_000_000_000_000, **{gpu.POWER: 1.0}), "n")), timeout=10)
    with Archive(tmp_path / "a.duckdb", read_only=True) as a:
        assert a.counts()["gpu_samples"] == 6


# -- window joins and the classification ---------------------------------------------------------------------------
def _archive_with(tmp_path, values_by_ts):
    a = Archive(tmp_path / "a.duckdb")
    pts = [Point(ts, m, v, UUID, 0) for ts, vals in values_by_ts.items() for m, v in vals.items()]
    a.ingest([RawBatch(orjson.dumps(otlp_json(pts, "node-1")), "otlp-metrics-json", "t", "doc")])
    return a


def test_window_join_averages_only_samples_inside(tmp_path):
    s = 1_700_000_000_000_000_000
    a = _archive_with(
        tmp_path,
        {
            s: {gpu.DRAM_BANDWIDTH: 0.9, gpu.HBM_USED: 76e9, gpu.HBM_LIMIT: 80e9, gpu.PEAK_BANDWIDTH: 3e12},
            s + 100: {gpu.DRAM_BANDWIDTH: 0.7, gpu.HBM_USED: 70e9, gpu.HBM_LIMIT: 80e9, gpu.PEAK_BANDWIDTH: 3e12},
            s + 10_000: {gpu.DRAM_BANDWIDTH: 0.1, gpu.HBM_USED: 10e9, gpu.HBM_LIMIT: 80e9, gpu.PEAK_BANDWIDTH: 3e12},
        },
    )
    with a:
        f = window_figures(a.con, s, s + 200)
        assert f["dram_bandwidth"] == pytest.approx(0.8) and f["dram_bandwidth_bytes_per_s"] == pytest.approx(2.4e12)
        assert f["hbm_used_max"] == pytest.approx(0.95) and f["engine_steps"] == 0 and f["preempted"] is None
        assert classify(f) == ("both", None)  # HBM ≥ 95% without engine steps: KV pressure (the weaker signal)
        assert window_figures(a.con, s + 300, s + 400)["samples"] == 0


def _fig(**kw):
    base = {
        "samples": 10,
        "dram_bandwidth": None,
        "hbm_used_max": 0.5,
        "engine_steps": 0,
        "preempted": None,
        "kv_used_max": None,
    }
    return {**base, **kw}


def test_classification_rules():
    assert classify(_fig(dram_bandwidth=0.82)) == ("bandwidth_bound", None)
    assert classify(_fig(dram_bandwidth=0.30)) == ("neither", None)
    assert classify(_fig(dram_bandwidth=0.30, engine_steps=5, preempted=2)) == ("kv_pressure", None)
    assert classify(_fig(dram_bandwidth=0.30, engine_steps=5, preempted=0, kv_used_max=0.97)) == ("kv_pressure", None)
    assert classify(_fig(dram_bandwidth=0.30, engine_steps=5, preempted=0, kv_used_max=0.5, hbm_used_max=0.99)) == (
        "neither",
        None,
    )  # engine steps say the pool had room: a full HBM is the engine's reservation
    assert classify(_fig()) == ("unknown", NO_DRAM_BANDWIDTH)
    assert classify(_fig(samples=0))[0] == "unknown"


def decode_tail_archive(path, with_gpu: bool) -> Archive:
    """Synthetic traces whose E2E tail is decode (requests 5 s apart, so decode intervals never overlap), plus,
    `with_gpu`, one GPU sample mid-decode of each request: DRAM bandwidth 0.9 for the requests given +900 ms of decode (15%, more than the
    p99 tail), 0.3 for the rest."""
    from budgetscope.ingest.files import read_batches
    from budgetscope.synthetic import SyntheticSpec, write_jsonl

    traces = path.with_suffix(".jsonl")
    write_jsonl(traces, SyntheticSpec(num_requests=200, cause="decode", rate_per_s=0.2, tail_fraction=0.15))
    a = Archive(path)
    a.ingest(read_batches(traces))
    if with_gpu:
        rows = a.con.execute(
            "SELECT first_token_ns + CAST(decode_ms * 5e5 AS BIGINT), decode_ms > "
            "(SELECT median(decode_ms) FROM requests) + 450 FROM requests"
        ).fetchall()
        pts = [
            Point(ts, m, v, UUID, 0)
            for ts, slow in rows
            for m, v in ((gpu.DRAM_BANDWIDTH, 0.9 if slow else 0.3), (gpu.HBM_USED, 40e9), (gpu.HBM_LIMIT, 80e9))
        ]
        a.ingest([RawBatch(orjson.dumps(otlp_json(pts, "node-1")), "otlp-metrics-json", "t", "doc")])
    return a


def test_report_says_unknown_without_samples_and_classifies_with_them(tmp_path):
    from budgetscope.analysis.report import build_report

    with decode_tail_archive(tmp_path / "none.duckdb", with_gpu=False) as a:
        t = build_report(a.con)["tiers"][0]
        assert t["gpu"] == {"classification": "unknown", "reason": NO_GPU_SAMPLES, "decode_dominated": None}
        assert "GPU" not in t["verdict"]
    with decode_tail_archive(tmp_path / "gpu.duckdb", with_gpu=True) as a:
        t = build_report(a.con)["tiers"][0]
        g = t["gpu"]
        assert g["decode_dominated"] and g["classification"] == "bandwidth_bound", g
        assert (
            g["tail"]["dram_bandwidth"] >= 0.7 > 0.4 > g["body"]["dram_bandwidth"]
        )  # Poisson arrivals overlap a little
        assert g["tail"]["hbm_used_max"] == pytest.approx(0.5) and g["tail"]["engine_steps"] == 0
        assert "its decode is bandwidth-bound" in t["verdict"]


def test_energy_counter_is_read_at_most_once_per_power_interval():
    sink = ListSink()
    s = GpuSampler(every_s=0.01, sink=sink, nvml=fake_pynvml(), host_name="n", flush_every_s=0.0, power_every_s=0.05)
    s.run(max_ticks=12)
    power = [p.ts_ns for p in sink.points if p.metric == gpu.POWER]
    assert 1 <= len(power) <= 3  # ~0.12 s of ticks, one energy reading per 0.05 s
    assert all(b - a >= 50_000_000 for a, b in zip(power, power[1:]))
