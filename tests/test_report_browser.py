"""The report in a real browser: headless Chromium (through Selenium and chromium-driver) opens the seed report
from a file URL with the network off. The page loads without console errors and without a request leaving the
machine, every plot renders, moving the scrubber changes the shown step (and moves the timeline's marker), and a
screenshot is kept in pytest's tmp dir as an artefact.

Skipped with the reason when Selenium, Chromium or its driver is missing (`.ci/run` installs the Debian packages
chromium and chromium-driver).
"""

import json
import shutil
from pathlib import Path

import pytest

from servesim.engine import simulate
from servesim.engines.config import EngineConfig
from servesim.report.html import write_report
from servesim.report.view import run_view
from servesim.workloads import load_workload

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> tuple[str, str]:
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    binary = next((p for b in BROWSERS if (p := shutil.which(b))), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("no Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    return binary, driver


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = _browser()
    opts = Options()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves
                "--proxy-server=127.0.0.1:9", "--disable-background-networking", "--no-first-run"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def loaded(browser, tmp_path_factory):
    cfgs = {"static": {}, "continuous": {}, "vllm": {"max_num_batched_tokens": 256}}
    views = [run_view(p, simulate(load_workload("seed"), EngineConfig(max_num_seqs=8, **c), p, "toy"))
             for p, c in cfgs.items()]
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(path, views, "servesim report: seed", "browser test")
    browser.get(path.as_uri())
    browser.execute_script("return new Promise(r => window.addEventListener('load', r) || "
                           "(document.readyState === 'complete' && r()))")
    return browser, path


def test_page_loads_without_console_errors_or_network(loaded):
    d, _ = loaded
    severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    urls = [json.loads(e["message"])["message"].get("params", {}).get("request", {}).get("url", "")
            for e in d.get_log("performance")]
    assert [u for u in urls if u and not u.startswith(("file:", "data:", "blob:", "about:"))] == []


def test_every_plot_renders(loaded):
    d, _ = loaded
    plots = d.execute_script(
        "return Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => [p.id, "
        "p.querySelectorAll('svg.main-svg').length, p.querySelectorAll('g.trace').length])")
    assert [p[0] for p in plots] == ["timeline-0", "timeline-1", "timeline-2", "latency", "workload"]
    assert all(svgs > 0 and traces > 0 for _, svgs, traces in plots), plots


def test_scrubber_changes_the_shown_step(loaded, tmp_path_factory):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d, _ = loaded
    box = d.find_element(By.ID, "step-2")  # the vllm run
    assert box.get_attribute("data-step") == "0"
    slider = d.find_element(By.ID, "scrub-2")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", slider)
    slider.send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)  # a user's three key presses
    assert box.get_attribute("data-step") == "3"
    assert "L 252 (prefill), d0 1, d1 1, d2 1, d3 1" in box.text  # step 3: L's first chunk beside the decodes
    assert "20.8 ms, 29.2 ms long, 256 of 256 budget tokens" in box.text
    marker = d.execute_script("return document.getElementById('timeline-2').layout.shapes[0].x0")
    assert marker == pytest.approx(20.8)  # the timeline's marker moved to step 3's start (ms)
    shot = Path(tmp_path_factory.mktemp("artefacts")) / "report.png"
    d.set_window_size(1400, min(d.execute_script("return document.body.scrollHeight"), 8000))
    assert d.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
