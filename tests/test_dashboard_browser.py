"""The dashboard and the postmortem in a real headless Chromium: every page loads without an exception or error
text; a PNG screenshot of each page is kept under test-artifacts/dashboard/ (gitignored)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = {
    "budgets": "",
    "breakdown": "breakdown",
    "tail_explorer": "tail_explorer",
    "timeline": "timeline",
    "request": "request",
    "sql": "sql",
    "what_if": "what_if",
    "capacity": "capacity",
}
SWEEP = SAMPLES / "sweep-tiny"  # a `budgetscope sweep` of the tiny engine (sample_traces/README.md)
SWEEP_BUDGETS = SAMPLES / "sweep-tiny.toml"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _need_browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver; `make test` does)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra has it)")
    pytest.importorskip("streamlit", reason="streamlit is not installed (the dashboard extra has it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _app(archive: Path, budgets: Path):
    """The dashboard over one archive as `budgetscope dashboard` serves it (its Streamlit settings), on a free port;
    yields its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetscope.cli",
            "dashboard",
            "-a",
            str(archive),
            "-b",
            str(budgets),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the dashboard did not start")
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def app_url():
    _need_browser()
    with _app(SAMPLES / "burst", SAMPLES / "budgets.toml") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _settle(page) -> None:
    """Wait until Streamlit has rendered a title and stopped running the script."""
    page.wait_for_selector("h1", timeout=60_000)
    page.wait_for_function(
        "!document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " || !document.querySelector('[data-testid=\"stStatusWidget\"]').innerText.includes('Running')",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)  # plotly charts draw after the script ends


def _errors_but_the_verdict(page) -> int:
    """Error boxes on the page other than the red verdict box of a BROKEN tier."""
    return (
        page.locator("[data-testid='stAlertContentError']").count()
        - page.locator("[class*='st-key-verdict-broken'] [data-testid='stAlertContentError']").count()
    )


def _box_rgb(page, status: str, tier: str) -> tuple[int, int, int]:
    """The background colour of a tier's verdict box, as the browser draws it."""
    box = page.locator(f".st-key-verdict-{status}-{tier} [data-testid='stAlert'] > div").first
    rgba = box.evaluate("e => getComputedStyle(e).backgroundColor")
    return tuple(int(float(v)) for v in rgba[rgba.index("(") + 1 : -1].split(",")[:3])


def _ingested(tmp_path: Path, outcomes: list[str]) -> Path:
    """An archive of one fast native `interactive` request an outcome."""
    from otlp_wire import jsonl, outcome_requests

    docs = outcome_requests(outcomes)
    src, a = tmp_path / "t.jsonl", tmp_path / "a.duckdb"
    src.write_text(jsonl(*docs))
    r = subprocess.run([sys.executable, "-m", "budgetscope.cli", "ingest", str(src), "-a", str(a)], capture_output=True)
    assert r.returncode == 0, r.stderr
    return a


@pytest.mark.parametrize(
    "outcomes, status", [(["error"] * 20, "broken"), (["ok", "error"] * 10, "broken"), (["ok"] * 20, "kept")]
)
def test_the_verdict_box_is_red_when_requests_fail(browser, tmp_path, outcomes, status):
    """All-error and half-error tiers are BROKEN in a red box; a healthy one is KEPT in a green box."""
    with _app(_ingested(tmp_path, outcomes), SAMPLES / "budgets.toml") as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(url)
        _settle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert _errors_but_the_verdict(page) == 0
        text = page.locator(f".st-key-verdict-{status}-interactive").inner_text()
        assert text.startswith(status.upper())
        r, g, b = _box_rgb(page, status, "interactive")
        assert (r > g and r > b) if status == "broken" else (g > r and g > b), (r, g, b)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"verdict-{outcomes.count('error')}-errors.png"), full_page=True)


def test_every_page_renders_without_errors(app_url, browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 2400})  # Streamlit scrolls inside its main block
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for name, path in PAGES.items():
        page.goto(f"{app_url}/{path}")
        _settle(page)
        assert page.locator("[data-testid='stException']").count() == 0, name
        assert _errors_but_the_verdict(page) == 0, name
        text = page.locator("[data-testid='stMain']").inner_text()
        for bad in ("Traceback", "Error:", "Exception"):
            assert bad not in text, f"{name}: {bad!r} on the page"
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert not errors, errors


def test_the_served_toolbar_is_a_viewers(app_url, browser):
    """No Deploy button and no developer entries (rerun, clear cache) in the served app's toolbar and menu."""
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(app_url)
    _settle(page)
    assert page.locator("[data-testid='stToolbar']").count() == 1  # the toolbar is there, and checked
    assert page.locator("[data-testid='stAppDeployButton']").count() == 0
    assert "Deploy" not in page.locator("[data-testid='stToolbar']").inner_text()
    menu = page.locator("[data-testid='stMainMenu']")
    if menu.count():
        menu.click()
        page.wait_for_timeout(500)
        listed = (
            page.locator("[data-testid='stMainMenuList']").inner_text()
            if page.locator("[data-testid='stMainMenuList']").count()
            else ""
        )
        assert "Clear cache" not in listed and "Rerun" not in listed


def test_pages_open_on_a_tier_that_has_requests(browser):
    """The demo budgets over the H200 sample: their one tier matches no request, its 345 requests sit in
    `default`; the Breakdown opens on `default` and breaks its tail down."""
    with _app(SAMPLES / "h200-1b-served", SAMPLES / "budgets.toml") as url:
        page = browser.new_page(viewport={"width": 1400, "height": 2000})
        page.goto(f"{url}/breakdown")
        _settle(page)
        page.wait_for_function(
            "document.querySelector('[data-testid=\"stMain\"]').innerText.includes('Tail = the')", timeout=60_000
        )
        chosen = page.locator(".st-key-bd_tier").inner_html()  # the select box, its chosen option in it
        assert "default (no budget)" in chosen and "interactive" not in chosen
        assert "Tail = the 10 requests" in page.locator("[data-testid='stMain']").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "breakdown-default-tier.png"), full_page=True)


def test_sidebar_time_slider_labels_fit_the_sidebar(app_url, browser):
    """The arrival-time slider's labels (its two values and the range ends) are whole and inside the sidebar."""
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(app_url)
    _settle(page)
    sidebar = page.locator("[data-testid='stSidebar']").bounding_box()
    labels = page.locator(
        "[data-testid='stSidebar'] [data-testid='stSlider'] "
        ":is([data-testid='stSliderThumbValue'], [data-testid='stSliderTickBarMin'], "
        "[data-testid='stSliderTickBarMax'])"
    )
    assert labels.count() >= 2
    for i in range(labels.count()):
        label = labels.nth(i)
        box = label.bounding_box()
        text = label.inner_text()
        assert box["x"] >= sidebar["x"] and box["x"] + box["width"] <= sidebar["x"] + sidebar["width"], text
        assert label.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), f"{text!r} is cut off"


def test_capacity_page_draws_a_recorded_sweep(browser):
    """The Capacity page over a real sweep archive: the verdict of `capacity.analyze`, the three panels drawn
    against the rate, the per-rate and signal tables; no error."""
    from budgetscope.analysis import capacity
    from budgetscope.analysis.budgets import load_budgets
    from budgetscope.opener import Archive

    with Archive(SWEEP, read_only=True, create=False) as a:
        res = capacity.analyze(a.con, load_budgets(SWEEP_BUDGETS))
    verdict = res["tiers"][0]["verdict"]
    with _app(SWEEP, SWEEP_BUDGETS) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/capacity")
        _settle(page)
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        # the signals table is the page's last element: under load it can draw after the status widget settles
        page.wait_for_function(
            "(document.querySelector(\"[data-testid='stMain']\") || {innerText: ''})"
            ".innerText.includes('engine_steps')",
            timeout=30_000,
        )
        text = page.locator("[data-testid='stMain']").inner_text()
        assert page.locator("[data-testid='stException']").count() == 0
        assert verdict.split(" (")[0] in text  # "Tier interactive keeps its budgets up to …"
        assert "Capacity" in text and "Knee" in text and "Takes over past it" in text
        assert "saturation signals" in text and "engine_steps" in text
        assert page.locator(".js-plotly-plot .bars").count() >= 1  # the stacked stage shares
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "capacity-sweep.png"), full_page=True)
    assert not errors, errors


def test_postmortem_opens_offline_without_errors(browser, tmp_path):
    out = tmp_path / "incident.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetscope.cli",
            "postmortem",
            "-a",
            str(SAMPLES / "burst"),
            "-b",
            str(SAMPLES / "budgets.toml"),
            "--from",
            "2026-11-21T00:00:00Z",
            "--to",
            "2026-11-23T00:00:00Z",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    requests, errors = [], []
    page.on("request", lambda q: requests.append(q.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(out.as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "postmortem.png"), full_page=True)
    assert [u for u in requests if not u.startswith(("file:", "data:", "blob:"))] == []
    assert not errors, errors
    assert "p99 TTFT" in page.inner_text("body")


def test_live_dashboard_shows_a_request_posted_after_the_page_loaded(browser, tmp_path):
    """`budgetscope dashboard --live` over a folder archive that a collector is writing: a request of a new
    tier posted after the page loaded appears on it, without a reload."""
    import json

    import httpx

    from budgetscope.collector import Collector
    from otlp_wire import export, native_request

    archive = tmp_path / "live"

    def post(port: int, tier: str) -> None:
        _, spans = native_request(arrival=time.time_ns(), tier=tier)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces",
            content=json.dumps(export(spans)),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert r.status_code == 200

    with Collector(archive, grpc_port=None, http_port=0) as c:
        post(c.http_port, "interactive")
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "budgetscope.cli", "dashboard", "-a", str(archive), "--live", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        pytest.fail("the dashboard did not start")
                    time.sleep(0.3)
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            page.goto(f"http://127.0.0.1:{port}/")
            _settle(page)
            page.wait_for_function("document.body.innerText.includes('Tier interactive')", timeout=30_000)
            assert "Tier overnight-batch" not in page.inner_text("body")
            post(c.http_port, "overnight-batch")  # after the page loaded
            page.wait_for_function("document.body.innerText.includes('Tier overnight-batch')", timeout=30_000)
            assert "Live: commit" in page.inner_text("body")
            assert page.locator("[data-testid='stException']").count() == 0
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "live.png"), full_page=True)
        finally:
            proc.terminate()
            proc.wait(10)
        # SIGTERM reached the server itself (no child left holding the port)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
