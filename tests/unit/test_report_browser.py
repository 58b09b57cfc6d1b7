"""A run's report.html as a reader sees it: opened in headless Chromium, driven through its
DevTools protocol (over the `websockets` package, where it is installed), checked for
console errors, for the verdict line and the matrix inside the first screen (the top
900 px of a 1280-wide window), and for any request the page makes (it must make none: one
self-contained file). Skipped where no Chromium (or no websockets) is installed; .ci/run
installs Chromium where it can.

Why a real browser: the HTML checks of test_report.py see markup, not layout; whether the
first screen holds what it must, and whether the page loads clean, only a browser says.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from test_report import make_run_dir

from mrbench.harness.cli import main
from mrbench.harness.show.report import render_report

VIEWPORT = (1280, 900)
START_TIMEOUT_S = 60
LOAD_TIMEOUT_S = 60
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    exe = os.environ.get("MRBENCH_CHROMIUM") or next(
        (p for p in map(shutil.which, BROWSERS) if p), None)
    if not exe:
        pytest.skip("no Chromium binary found (chromium, chromium-browser, google-chrome; "
                    "or MRBENCH_CHROMIUM): `apt-get install chromium` to run this test")
    return exe


class Page:
    """One page of a headless Chromium over the DevTools protocol: commands in order, every
    event kept (console, exceptions, log entries, requests)."""

    def __init__(self, ws) -> None:
        self.ws, self.next_id, self.events = ws, 0, []

    def send(self, method: str, timeout: float = LOAD_TIMEOUT_S, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps(dict(id=self.next_id, method=method, params=params)))
        end = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(end - time.monotonic(), 0.1)))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = LOAD_TIMEOUT_S) -> None:
        end = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(json.loads(self.ws.recv(timeout=max(end - time.monotonic(),
                                                                   0.1))))

    def of(self, method: str) -> list[dict]:
        return [e["params"] for e in self.events if e.get("method") == method]


def open_in_chromium(html: Path, tmp: Path, screenshot: Path | None = None) -> dict:
    """Load `html` at VIEWPORT; returns the console errors, the requests other than the
    file itself and data: URIs, the viewport, and where the verdict line and the matrix lie
    (top, bottom, left, right in CSS px, or None where absent)."""
    sync_client = pytest.importorskip(
        "websockets.sync.client", reason="websockets drives Chromium's DevTools protocol")
    profile = tmp / "chromium-profile"
    log = (tmp / "chromium.log").open("w")
    args = [_chromium(), "--headless=new", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", f"--user-data-dir={profile}",
            "--remote-debugging-port=0", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
            *(["--no-sandbox"] if os.geteuid() == 0 else []), "about:blank"]
    proc = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        port_file, end = profile / "DevToolsActivePort", time.monotonic() + START_TIMEOUT_S
        while not port_file.is_file() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"Chromium did not start: {(tmp / 'chromium.log').read_text()}")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        with sync_client.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            page = Page(ws)
            for domain in ("Runtime", "Log", "Network", "Page"):
                page.send(f"{domain}.enable")
            page.send("Emulation.setDeviceMetricsOverride", width=VIEWPORT[0],
                      height=VIEWPORT[1], deviceScaleFactor=1, mobile=False)
            url = html.resolve().as_uri()
            page.send("Page.navigate", url=url)
            page.wait_for("Page.loadEventFired")
            where = page.send("Runtime.evaluate", returnByValue=True, expression="""(() => {
                const at = id => { const e = document.getElementById(id);
                  if (!e) return null; const b = e.getBoundingClientRect();
                  return {top: b.top, bottom: b.bottom, left: b.left, right: b.right}; };
                return {width: innerWidth, height: innerHeight, scrollY: scrollY,
                        line: at('verdict-line'), matrix: at('matrix')}; })()""")
            if screenshot is not None:
                shot = page.send("Page.captureScreenshot", format="png")
                screenshot.write_bytes(base64.b64decode(shot["data"]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    errors = [f"console.{c['type']}: {c.get('args')}" for c in page.of("Runtime.consoleAPICalled")
              if c["type"] in ("error", "assert")]
    errors += [f"exception: {x['exceptionDetails'].get('text')}"
               for x in page.of("Runtime.exceptionThrown")]
    errors += [f"log: {x['entry'].get('text')} ({x['entry'].get('url')})"
               for x in page.of("Log.entryAdded") if x["entry"].get("level") == "error"]
    requests = [r["request"]["url"] for r in page.of("Network.requestWillBeSent")
                if r["request"]["url"] != url and not r["request"]["url"].startswith("data:")]
    return dict(errors=errors, requests=requests, **where["result"]["value"])


def assert_reads_at_a_glance(seen: dict) -> None:
    """No console error, no request, and the verdict line and the matrix wholly inside the
    first screen."""
    assert seen["errors"] == []
    assert seen["requests"] == []
    assert (seen["width"], seen["height"], seen["scrollY"]) == (*VIEWPORT, 0)
    for part in ("line", "matrix"):
        box = seen[part]
        assert box is not None, f"{part} missing"
        assert 0 <= box["top"] < box["bottom"] <= VIEWPORT[1], (part, box)
        assert 0 <= box["left"] < box["right"] <= VIEWPORT[0], (part, box)


def test_a_report_with_regressions_and_failures_reads_at_a_glance(tmp_path):
    _chromium()
    run = make_run_dir(tmp_path / "run")
    seen = open_in_chromium(render_report(run), tmp_path)
    assert_reads_at_a_glance(seen)


@pytest.mark.slow
def test_a_smoke_runs_report_reads_at_a_glance_in_chromium(tmp_path, data_dir, capsys):
    """A real `mrbench run smoke` (bundled target, CPU): its report as Chromium shows it.
    The first screen is saved as first-screen.png in the test's temporary directory;
    MRBENCH_REPORT_SCREENSHOT=FILE saves it there instead, to look at."""
    _chromium()
    pytest.importorskip("websockets.sync.client", reason="websockets drives Chromium")
    out = tmp_path / "smoke"
    code = main(["run", "smoke", "--out", str(out)])
    assert code in (0, 1), capsys.readouterr().err[-3000:]     # pass or regression: judged
    shot = Path(os.environ.get("MRBENCH_REPORT_SCREENSHOT") or tmp_path / "first-screen.png")
    seen = open_in_chromium(out / "report.html", tmp_path, shot)
    assert_reads_at_a_glance(seen)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
