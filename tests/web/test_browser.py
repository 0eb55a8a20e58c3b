"""The dashboard in a real browser: Debian's Chromium driven by Selenium through Debian's chromedriver.

One scheduler runs on the database (a FakeClock at an odd instant) while
the browser loads each page, is refused actions without the token, signs
in, clicks "Run now" and "Pause", and sees both take effect. A screenshot
of each page goes to ``build/screenshots/`` (or ``$PERSCHED_SCREENSHOTS``);
they are not committed.

Locally the test is skipped when Chromium, chromedriver or selenium is
missing; in CI (``CI`` set) that is a failure: ``.ci/run`` installs them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from persched._interfaces.dashboard.actions import MESSAGES
from tests.support.helpers import TIMEOUT, wait_until
from tests.web.conftest import START, TOKEN, fill, serve_app

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched.testing import FakeClock

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SHOTS = Path(os.environ.get("PERSCHED_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "build" / "screenshots")

pytestmark = pytest.mark.slow


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}; .ci/run installs it (apt-get install chromium chromium-driver; pip install .[dev])")
    pytest.skip(why)


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless Chromium with a fresh profile; selenium-manager is kept offline."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            _missing(f"{path} is missing")
    monkeypatch.setenv("SE_OFFLINE", "true")  # never let selenium-manager download a browser or driver
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(TIMEOUT)
    driver.set_script_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Any, name: str) -> None:  # noqa: ANN401 - a selenium WebDriver
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _runs(db: str, job_id: str) -> list[tuple[str | None, int]]:
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"), timeout=TIMEOUT)) as conn:
        return conn.execute(
            "SELECT outcome, run_now FROM persched_runs WHERE job_id = ? ORDER BY run_id", (job_id,)
        ).fetchall()


def _after_click(driver: Any, element_id: str) -> Any:  # noqa: ANN401 - selenium objects
    """Click the button `element_id` and wait for the page the form leads to (it has a #message)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    button = driver.find_element(By.ID, element_id)
    button.click()
    WebDriverWait(driver, TIMEOUT).until(lambda _: _stale(button))
    return WebDriverWait(driver, TIMEOUT).until(expected_conditions.presence_of_element_located((By.ID, "message")))


def _stale(element: Any) -> bool:  # noqa: ANN401 - a selenium WebElement
    """Whether `element` left the document. Chromium 156 reports a node of a page gone as "does not
    belong to the document", which selenium's `staleness_of` does not take for stale (CI, 2026-12-02)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def _ids(driver: Any, selector: str) -> list[str]:  # noqa: ANN401 - a selenium WebDriver
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def test_pages_pause_and_run_now_in_a_browser(browser: Any, tmp_path: Path) -> None:  # noqa: ANN401
    from selenium.webdriver.common.by import By

    from persched.testing import FakeClock

    db = f"sqlite:///{tmp_path / 'browser.db'}"
    clock: FakeClock = FakeClock(START)
    sched = fill(db, clock)
    try:
        for dashboard in serve_app(db, TOKEN, clock.now_us):  # actions on the scheduler's clock
            base = dashboard.own_url  # as `persched web` prints it
            # The jobs table.
            browser.get(base + "/")
            assert {"good", "bad", "skipper"} <= set(_ids(browser, "#jobs td:first-child a"))
            _shot(browser, "jobs")
            # A job page with its chart, reached by clicking.
            browser.find_element(By.LINK_TEXT, "skipper").click()
            wait_until(lambda: browser.find_elements(By.ID, "chart-lateness"), message="the job page")
            assert browser.find_element(By.ID, "chart-lateness").is_displayed()
            assert browser.find_elements(By.CSS_SELECTOR, "#chart-duration rect.missed-range")
            _shot(browser, "job")
            # The runs page, filtered by clicking "error".
            browser.get(base + "/runs")
            browser.find_element(By.ID, "filter-error").click()
            wait_until(lambda: "Runs: error" in browser.title, message="the filtered runs page")
            assert set(_ids(browser, "#runs td.error")) == {"error"}
            assert not browser.find_elements(By.CSS_SELECTOR, "#runs td.ok")
            _shot(browser, "runs-error")

            # Without signing in: no buttons, and a posted action is refused.
            browser.get(base + "/job?id=good")
            assert not browser.find_elements(By.ID, "btn-pause")
            browser.execute_script(
                "const f = document.createElement('form'); f.method = 'post'; f.action = '/action';"
                "for (const [k, v] of [['id', 'good'], ['action', 'pause'], ['csrf', 'forged']]) {"
                "  const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); }"
                "document.body.appendChild(f); f.submit();"
            )
            wait_until(lambda: "Refused" in browser.page_source, message="the refusal page")
            _shot(browser, "refused")
            assert not sched.get_job("good").paused  # type: ignore[union-attr]  # scheduled above

            # Sign in with the token.
            browser.get(base + "/login")
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            browser.find_element(By.ID, "btn-login").click()
            wait_until(lambda: browser.find_elements(By.ID, "jobs"), message="back on the jobs page")

            # Run now: the running scheduler picks the request up and runs it, off the grid.
            browser.get(base + "/job?id=good")
            assert MESSAGES["run-now"] in _after_click(browser, "btn-run-now").text
            _shot(browser, "run-now")

            def ran_now() -> bool:
                clock.advance(1)  # the pick-up of changes by other processes polls once a (fake) second
                sched.wait_idle(TIMEOUT)
                return ("ok", 1) in _runs(db, "good")

            wait_until(ran_now, message="the run-now run of 'good'")
            browser.refresh()
            assert "ok, run-now" in _ids(browser, "#runs td.ok")

            # Pause: the page says so, and no slot of the job runs any more.
            assert MESSAGES["paused"] in _after_click(browser, "btn-pause").text
            assert browser.find_element(By.ID, "job-state").text == "paused"
            assert browser.find_elements(By.ID, "btn-resume")
            _shot(browser, "paused")
            wait_until(lambda: sched.get_job("good").paused, message="the scheduler sees the pause")  # type: ignore[union-attr]
            before = len(_runs(db, "good"))
            for _ in range(3):
                clock.advance(10)
                assert sched.wait_idle(TIMEOUT)
            assert len(_runs(db, "good")) == before
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_namespace_views_in_a_browser(browser: Any, tmp_path: Path) -> None:  # noqa: ANN401
    """`persched --namespace web web`: its jobs first, the others one click away, an action in the job's own."""
    from selenium.webdriver.common.by import By

    from tests.web.test_namespaces import two_namespaces

    db = f"sqlite:///{tmp_path / 'namespaces.db'}"
    two_namespaces(db)
    for dashboard in serve_app(db, TOKEN, namespace="web"):
        base = dashboard.own_url
        browser.get(base + "/")
        assert set(_ids(browser, "#jobs td:first-child a")) == {"web.a", "web.b"}
        assert browser.find_element(By.ID, "namespace").text == "namespace web"
        _shot(browser, "namespace-web")
        browser.find_element(By.LINK_TEXT, "default").click()
        wait_until(lambda: browser.find_element(By.ID, "namespace").text == "namespace default", message="default")
        assert set(_ids(browser, "#jobs td:first-child a")) == {"good", "bad", "skipper"}
        browser.find_element(By.ID, "ns-all").click()
        wait_until(lambda: browser.find_element(By.ID, "namespace").text == "all namespaces", message="all")
        assert set(_ids(browser, "#jobs td.ns")) == {"default", "web"}
        _shot(browser, "namespace-all")
        # Sign in, then open a job of the other namespace from the all-namespaces view and pause it.
        browser.get(base + "/login")
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "btn-login").click()
        wait_until(lambda: browser.find_elements(By.ID, "jobs"), message="back on the jobs page")
        browser.get(base + "/?all=1")
        browser.find_element(By.LINK_TEXT, "good").click()
        wait_until(lambda: browser.find_elements(By.ID, "job-namespace"), message="the job page of good")
        assert browser.find_element(By.ID, "job-namespace").text == "default"
        assert MESSAGES["paused"] in _after_click(browser, "btn-pause").text
        _shot(browser, "namespace-paused")
        with closing(sqlite3.connect(db.removeprefix("sqlite:///"), timeout=TIMEOUT)) as conn:
            flags = dict(conn.execute("SELECT job_id, paused FROM persched_jobs").fetchall())
        assert flags == {"good": 1, "bad": 0, "skipper": 0, "web.a": 0, "web.b": 0}


def test_the_session_cookie_never_reaches_another_local_service(browser: Any, db: str) -> None:  # noqa: ANN401
    """Cookies ignore ports: a cookie set for 127.0.0.1 went to every service on it, which could replay it.

    The browser signs in where `persched web` says (persched.localhost), then visits a service on another
    port of 127.0.0.1 and of localhost, which records the cookies it is sent: none of persched's.
    """
    import http.server

    from selenium.webdriver.common.by import By

    received: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.headers.get("Cookie") or "")
            body = b"<html><title>other</title>another local service</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        for dashboard in serve_app(db, TOKEN):
            browser.get(dashboard.url + "/login")  # 127.0.0.1: no form, a link to the dashboard's own name
            link = browser.find_element(By.CSS_SELECTOR, "#own-name a")
            assert link.get_attribute("href") == f"{dashboard.own_url}/login"
            link.click()
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            browser.find_element(By.ID, "btn-login").click()
            wait_until(lambda: browser.find_elements(By.ID, "jobs"), message="signed in, on the jobs page")
            browser.get(dashboard.own_url + "/job?id=good")
            assert browser.find_elements(By.ID, "btn-pause")  # signed in
            names = {cookie["name"] for cookie in browser.get_cookies()}
            assert f"persched_session_{dashboard.port}" in names
            for name in ("127.0.0.1", "localhost"):
                browser.get(f"http://{name}:{other.server_port}/")
                wait_until(lambda: "another local service" in browser.page_source, message=f"the page at {name}")
            assert len(received) >= 2  # each page (and the favicon it asks for)
            assert not any("persched_" in cookies for cookies in received), received
    finally:
        other.shutdown()
        other.server_close()
        thread.join(TIMEOUT)
