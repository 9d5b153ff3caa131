"""`collect` beyond loopback: TLS on both receivers and bearer-token auth, with the real OpenTelemetry OTLP
exporters configured the standard way (OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_CERTIFICATE)."""

from __future__ import annotations

import ssl

import httpx
import pytest

from budgetscope.auth import bearer_ok, exposure_warning, is_loopback, read_token
from budgetscope.collector import Collector, CollectorError
from conftest import rows
from tls_cert import self_signed

grpc = pytest.importorskip("grpc")
pytest.importorskip("cryptography")
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

from test_collector import _bodies, _clean_otlp_env, _export  # noqa: E402,F401 - the fixture is used by name

TOKEN = "s3cr3t-t0ken"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def cert(tmp_path):
    return self_signed(tmp_path)


def _spans(path) -> int:
    return rows(path, "SELECT count(*) FROM spans")[0][0]


def test_real_exporters_reach_a_tls_collector_with_a_bearer_token(archive_path, cert, monkeypatch):
    cert_path, key_path = cert
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(cert_path))
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # requests lets these override the exporter's CA file
        monkeypatch.delenv(name, raising=False)
    with Collector(
        archive_path, grpc_port=0, http_port=0, tls_cert=str(cert_path), tls_key=str(key_path), auth_token=TOKEN
    ) as c:
        assert c.endpoints[1].startswith("OTLP/HTTP https://") and c.endpoints[0].endswith("(TLS)")
        _export(HttpExporter(endpoint=f"https://127.0.0.1:{c.http_port}/v1/traces"), 2)
        _export(GrpcExporter(endpoint=f"https://127.0.0.1:{c.grpc_port}"), 3)
        _export(GrpcExporter(endpoint=f"localhost:{c.grpc_port}", insecure=False), 1)
    assert rows(archive_path, "SELECT count(*) FROM requests")[0][0] == 6


def test_a_missing_or_wrong_token_is_refused_and_lands_nothing(archive_path, cert):
    cert_path, key_path = cert
    proto, doc = _bodies()
    ctx = ssl.create_default_context(cafile=str(cert_path))
    with Collector(
        archive_path, grpc_port=0, http_port=0, tls_cert=str(cert_path), tls_key=str(key_path), auth_token=TOKEN
    ) as c:
        url = f"https://127.0.0.1:{c.http_port}/v1/traces"
        with httpx.Client(verify=ctx, timeout=10) as h:
            for auth in (None, "Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"):
                headers = {"Content-Type": "application/json", **({"Authorization": auth} if auth else {})}
                r = h.post(url, content=doc, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), auth
                assert r.json()["code"] == 16  # UNAUTHENTICATED
            assert (
                h.post(
                    url, content=doc, headers={"Content-Type": "application/json", "authorization": f"bearer {TOKEN}"}
                ).status_code
                == 200
            )
        with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port gets no answer
            httpx.post(
                f"http://127.0.0.1:{c.http_port}/v1/traces",
                content=doc,
                timeout=5,
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
            )
        creds = grpc.ssl_channel_credentials(cert_path.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{c.grpc_port}", creds) as ch:
            export = ch.unary_unary(EXPORT)
            for metadata in ((), (("authorization", "Bearer wrong"),)):
                with pytest.raises(grpc.RpcError) as e:
                    export(proto, metadata=metadata, timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            export(proto, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:  # plaintext to a TLS port
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary(EXPORT)(proto, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert c.stats.batches == 2
    assert _spans(archive_path) == 15  # the same 15 spans, as JSON and as protobuf


def test_token_without_tls_still_checked_on_plain_http(archive_path):
    _, doc = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0, auth_token=TOKEN) as c:
        url = f"http://127.0.0.1:{c.http_port}/v1/traces"
        assert httpx.post(url, content=doc, headers={"Content-Type": "application/json"}).status_code == 401
        r = httpx.post(
            url, content=doc, headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 200


def test_bad_tls_settings_are_one_line_errors(archive_path, cert, tmp_path):
    cert_path, key_path = cert
    with pytest.raises(CollectorError, match="needs both a certificate and its key"):
        Collector(archive_path, grpc_port=0, http_port=0, tls_cert=str(cert_path))
    with pytest.raises(CollectorError, match="cannot read the TLS key .*missing.pem"):
        Collector(
            archive_path, grpc_port=0, http_port=0, tls_cert=str(cert_path), tls_key=str(tmp_path / "missing.pem")
        ).start()
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(CollectorError, match="do not load") as e:
        Collector(
            archive_path, grpc_port=0, http_port=0, tls_cert=str(cert_path), tls_key=str(tmp_path / "junk.pem")
        ).start()
    assert "\n" not in str(e.value)
    with pytest.raises(CollectorError, match="one word"):
        Collector(archive_path, grpc_port=0, http_port=0, auth_token="two words")


def test_bearer_token_and_exposure_rules(tmp_path, monkeypatch):
    assert bearer_ok(f"Bearer {TOKEN}", TOKEN) and bearer_ok(f"  BEARER   {TOKEN} ", TOKEN)
    assert not any(bearer_ok(h, TOKEN) for h in (None, "", TOKEN, f"Bearer {TOKEN[:-1]}", f"Token {TOKEN}"))
    assert bearer_ok(None, None)
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.5", "my-host")))
    assert exposure_warning("127.0.0.1", False, False, "x") is None
    assert "without authentication" in exposure_warning("0.0.0.0", False, True, "set --auth-token-file")
    assert "in clear" in exposure_warning("::", True, False, "x")
    assert exposure_warning("0.0.0.0", True, True, "x") is None
    monkeypatch.setenv("T_ENV", " env-token ")
    assert read_token(None, "T_ENV") == "env-token"
    (tmp_path / "t").write_text("file-token\n")
    assert read_token(tmp_path / "t", "T_ENV") == "file-token"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        read_token(tmp_path / "empty", "T_ENV")
    monkeypatch.delenv("T_ENV")
    assert read_token(None, "T_ENV") is None


def test_collect_warns_when_reachable_without_a_token(archive_path, monkeypatch):
    """The CLI wiring: a host that is not loopback (faked here: tests bind 127.0.0.1 only) without a token
    prints the warning; a token file silences the missing-auth warning."""
    from click.testing import CliRunner

    import budgetscope.auth as auth
    from budgetscope.commands import collect as command

    def fake_is_loopback(host: str) -> bool:
        return False

    monkeypatch.setattr(auth, "is_loopback", fake_is_loopback)

    def fake_signals_stop_at_once(stop) -> dict:
        stop.set()
        return {}

    monkeypatch.setattr(command, "_on_signals", fake_signals_stop_at_once)
    result = CliRunner().invoke(command.collect, ["-a", str(archive_path), "--grpc-port", "0", "--http-port", "0"])
    assert result.exit_code == 0, result.output
    assert "warning: listening on 127.0.0.1 without authentication" in result.output
    token = archive_path.parent / "token"
    token.write_text(TOKEN)
    result = CliRunner().invoke(
        command.collect,
        ["-a", str(archive_path), "--grpc-port", "0", "--http-port", "0", "--auth-token-file", str(token)],
    )
    assert result.exit_code == 0 and "without TLS" in result.output and "without authentication" not in result.output
    result = CliRunner().invoke(command.collect, ["-a", str(archive_path), "--auth-token-file", str(token) + "x"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "cannot read the token file" in result.output
