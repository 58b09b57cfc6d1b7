"""harness/show/report.py: one self-contained, escaped HTML file from a synthetic results dir."""
from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd

from mrbench.harness.show.formatting import fmt_num
from mrbench.harness.show.report import render_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
XSS = "<script>alert('x')</script> & boom"
WORKLOADS = ("gsm8k", "mooncake")


# ---- synthetic results directory --------------------------------------------------------

def _summary() -> dict:
    checks = []
    for w in WORKLOADS:
        checks += [
            {"workload": w, "metric": "p99_ttft_ms", "unit": "ms", "baseline": 12.3456,
             "candidate": 12.9, "delta": 12.9 - 12.3456, "ci": [-0.2, 1.3], "p_value": 0.21,
             "threshold": "+5%", "method": "bootstrap", "verdict": "pass", "note": ""},
            {"workload": w, "metric": "p99_e2el_ms", "unit": "ms", "baseline": 250.0,
             "candidate": 300.0, "delta": 0.2, "ci": [0.12, 0.28], "p_value": 1e-6,
             "threshold": "+5%", "method": "bootstrap", "verdict": "regression",
             "note": "slower <tail>", "delta_kind": "relative",
             "bar": {"kind": "max_relative_increase", "value": 0.05, "alpha": 0.05}},
            {"workload": w, "metric": "accuracy_strict", "unit": "", "baseline": 0.98,
             "candidate": None, "delta": None, "ci": None, "p_value": None,
             "threshold": "-2pp", "method": "wilson", "verdict": "info", "note": ""},
            {"workload": w, "metric": "throughput_tok_s", "unit": "tok/s", "baseline": 123456.7,
             "candidate": 120000.0, "delta": -3456.7, "ci": [-5000.0, -1000.0],
             "p_value": 0.0004, "threshold": "-5%", "method": "mann-whitney",
             "verdict": "pass", "note": ""},
        ]
    return {"verdict": "regression", "suite": "nightly-<cpu>", "checks": checks,
            "failures": [{"workload": "mooncake", "side": "candidate", "error": XSS}]}


def _manifest() -> dict:
    return {"versions": {"mrbench": "0.1.0", "torch": "2.13.0"}, "git_sha": "abc123",
            "device": "cpu", "seeds": [0, 1],
            "config": {"runners": {"baseline": "v1", "candidate": "v2"},
                       "weird": "</pre><b>not bold</b>"}}


def _tables(seed: int = 0):
    rng = np.random.default_rng(seed)
    req, itl, steps = [], [], []
    for w in WORKLOADS:
        for side, slow in (("baseline", 1.0), ("candidate", 1.1)):
            for i in range(40):
                out = int(rng.integers(4, 20))
                req.append({"workload": w, "side": side, "runner": "v1" if side == "baseline" else "v2",
                            "req_index": i, "prompt_tokens": int(rng.integers(5, 60)),
                            "output_tokens": out, "ttft_ms": slow * rng.gamma(2, 5),
                            "tpot_ms": slow * rng.gamma(3, 1), "e2e_ms": slow * rng.gamma(4, 20),
                            # blanks mixed in: scoring may be absent for some requests
                            "correct_strict": "" if i % 10 == 0 else bool(rng.random() < 0.9),
                            "agrees": "" if side == "baseline" else bool(rng.random() < 0.95)})
                for _ in range(out - 1):
                    itl.append({"workload": w, "side": side, "req_index": i,
                                "itl_ms": slow * rng.gamma(3, 1)})
            for inst in ("prefill", "decode") if w == "mooncake" else ("0",):
                for s in range(60):
                    row = {"workload": w, "side": side, "instance": inst, "step": s,
                           "duration_ms": slow * rng.gamma(5, 2), "num_reqs": 4,
                           "num_tokens": 40, "kind": "mixed"}
                    for p, m in zip(("prepare", "forward", "sample", "postprocess", "output"),
                                    (0, 0, 0, 1, 1)):
                        row[f"syncs_{p}"] = m + (side == "candidate" and p == "prepare")
                    row["ops"], row["allocs"] = 100, 3
                    steps.append(row)
    return pd.DataFrame(req), pd.DataFrame(itl), pd.DataFrame(steps)


def make_run_dir(d: Path, *, steps_csv: bool = True, requests_csv: str = "full",
                 itl_csv: bool = True, sync_cols: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps(_summary()))
    (d / "manifest.json").write_text(json.dumps(_manifest()))
    req, itl, steps = _tables()
    if requests_csv == "full":
        req.to_csv(d / "requests.csv", index=False)
    elif requests_csv == "empty":
        (d / "requests.csv").write_text("")
    elif requests_csv == "header":
        req.iloc[:0].to_csv(d / "requests.csv", index=False)
    elif requests_csv == "no-scores":
        req.drop(columns=["correct_strict", "agrees", "tpot_ms"]).to_csv(d / "requests.csv", index=False)
    if itl_csv:
        itl.to_csv(d / "itl.csv", index=False)
    if steps_csv:
        if not sync_cols:
            steps = steps.drop(columns=[c for c in steps.columns if c.startswith("syncs_")] + ["ops", "allocs"])
        steps.to_csv(d / "steps.csv", index=False)
    return d


# ---- HTML inspection ---------------------------------------------------------------------

class _Scan(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[str, dict]] = []  # (tag, attrs) in document order
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.events.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.events.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def scan(path: Path) -> tuple[str, _Scan]:
    html = path.read_text(encoding="utf-8")
    s = _Scan()
    s.feed(html)
    s.close()
    return html, s


def assert_self_contained(html: str, s: _Scan) -> list[bytes]:
    """No external references, no scripts; returns the decoded PNGs."""
    for tag, attrs in s.events:
        assert tag not in ("script", "link", "iframe", "object", "embed"), tag
        for name in ("src", "href", "srcset", "data", "poster"):
            v = (attrs.get(name) or "").strip().lower()
            assert not v.startswith(("http://", "https://", "//")), (tag, name, v[:80])
    low = html.lower()
    assert "<script src" not in low and "<link href" not in low and "@import" not in low
    assert "url(http" not in low.replace(" ", "")
    pngs = []
    for tag, attrs in s.events:
        if tag != "img":
            continue
        src = attrs.get("src") or ""
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix), src[:60]
        data = base64.b64decode(src[len(prefix):], validate=True)
        assert data.startswith(PNG_SIGNATURE)
        pngs.append(data)
    return pngs


def assert_png_readable(data: bytes):
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(data), format="png")
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50


def first_index(s: _Scan, pred) -> int:
    return next(i for i, ev in enumerate(s.events) if pred(ev))


# ---- tests -------------------------------------------------------------------------------

def test_full_report(tmp_path):
    run = make_run_dir(tmp_path / "run")
    out = render_report(run)
    assert out == run / "report.html" and out.is_file()
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]  # atomic write cleaned up
    html, s = scan(out)
    assert out.stat().st_size < 2_000_000

    pngs = assert_self_contained(html, s)
    # 6 plots per workload: distance to the bar, latency CDFs, p99, syncs, step duration,
    # accuracy
    assert len(pngs) == 6 * len(WORKLOADS)
    for data in pngs:
        assert_png_readable(data)

    # order: badge, matrix, the regressions, then the folded details with their images,
    # then the manifest
    badge = first_index(s, lambda ev: ev[1].get("id") == "verdict-badge")
    matrix = first_index(s, lambda ev: ev[1].get("id") == "matrix")
    attention = first_index(s, lambda ev: ev[1].get("id") == "attention")
    details = first_index(s, lambda ev: ev[0] == "details")
    img = first_index(s, lambda ev: ev[0] == "img")
    manifest = first_index(s, lambda ev: ev[1].get("id") == "manifest")
    assert badge < matrix < attention < details < img < manifest
    assert "regression" in s.events[badge][1]["class"].split()
    assert "open" not in s.events[details][1]                  # folded by default

    # one detail row per check, regression rows flagged; the regressions listed first
    # link to theirs
    rows = [ev for ev in s.events if ev[0] == "tr" and ev[1].get("id", "").startswith("check-")]
    assert len(rows) == len(_summary()["checks"])
    assert sum("regression" in ev[1]["class"].split() for ev in rows) == len(WORKLOADS)
    links = [ev[1]["href"] for ev in s.events[attention:details] if ev[0] == "a"]
    assert links == [f"#check-{w}-p99_e2el_ms" for w in WORKLOADS]

    text = "".join(s.text)
    # escaping: the failure's error string is text, never markup
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(" in html
    assert XSS in text
    assert "<b>not bold</b>" not in html and "</pre><b>" not in html
    assert '"weird": "</pre><b>not bold</b>"' in text  # manifest pretty-printed, escaped
    assert '"git_sha": "abc123"' in text
    assert "nightly-<cpu>" in text and "slower <tail>" in text
    # number formatting: None as an em dash, sensible digits, big numbers in full
    assert "—" in text and "12.35" in text and "123,457" in text and "<1e-4" in text
    for w in WORKLOADS:
        assert w in text
    # the regression's cell: its figure against its structured bar; a relative change in %
    assert "+20 % / bar +5 %" in text and "CI [+12 %, +28 %]" in text


def test_out_path_and_overwrite(tmp_path):
    run = make_run_dir(tmp_path / "run", steps_csv=False, itl_csv=False)
    target = tmp_path / "elsewhere" / "r.html"
    assert render_report(run, target) == target
    first = target.read_text()
    assert render_report(run, target) == target  # replaces, does not append
    assert target.read_text() == first
    assert not (run / "report.html").exists()


def test_missing_and_empty_inputs(tmp_path):
    # no steps.csv, no itl.csv, requests.csv with a header only
    run = make_run_dir(tmp_path / "a", steps_csv=False, itl_csv=False, requests_csv="header")
    html, s = scan(render_report(run))
    assert_self_contained(html, s)
    assert any(ev[1].get("id") == "matrix" for ev in s.events)
    imgs = [ev for ev in s.events if ev[0] == "img"]
    assert len(imgs) == 2 * len(WORKLOADS)  # distance to the bar and p99, from summary.json
    assert "no data" in "".join(s.text)

    # requests.csv of zero bytes, steps.csv without sync columns, requests without scores
    run = make_run_dir(tmp_path / "b", requests_csv="empty", sync_cols=False)
    html, s = scan(render_report(run))
    for data in assert_self_contained(html, s):
        assert_png_readable(data)
    run = make_run_dir(tmp_path / "c", requests_csv="no-scores", sync_cols=False)
    html, s = scan(render_report(run))
    assert_self_contained(html, s)
    assert "Host syncs per step, by phase: no data" in "".join(s.text)
    assert "Accuracy and token agreement: no data" in "".join(s.text)


def test_nothing_but_an_empty_dir(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    html, s = scan(render_report(run))
    assert_self_contained(html, s)
    badge = next(ev for ev in s.events if ev[1].get("id") == "verdict-badge")
    assert "error" in badge[1]["class"].split()
    assert any(ev[1].get("id") == "matrix" for ev in s.events)
    assert "manifest.json not found" in "".join(s.text)


def test_helpers():
    assert fmt_num(None) == "—" and fmt_num(float("nan")) == "—"
    assert fmt_num(12.3456) == "12.35" and fmt_num(0.0012345) == "0.001234"
    assert fmt_num(0.05, signed=True) == "+0.05" and fmt_num(-3.0, signed=True) == "-3"
    assert fmt_num(1234567.8) == "1,234,568" and fmt_num(0) == "0"


def test_long_step_series_is_binned(tmp_path):
    """A long run (more steps than are drawn one by one) and an all-blank instance column."""
    run = tmp_path / "long"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"verdict": "pass", "suite": "s", "checks": [],
                                                  "failures": []}))
    n = 5000
    pd.DataFrame({"workload": "w", "side": np.repeat(["baseline", "candidate"], n),
                  "instance": np.nan, "step": np.tile(np.arange(n), 2),
                  "duration_ms": np.random.default_rng(0).gamma(5, 2, 2 * n)}
                 ).to_csv(run / "steps.csv", index=False)
    html, s = scan(render_report(run))
    pngs = assert_self_contained(html, s)
    assert len(pngs) == 1  # the per-step duration plot only
    assert_png_readable(pngs[0])


def test_plots_drawn_by_several_processes_are_the_ones_drawn_here(tmp_path, monkeypatch):
    """The workloads' plots are drawn in forked workers where there are CPUs for them; the
    page must be the same byte for byte as one drawn in this process alone."""
    import mrbench.harness.show.report as report

    run = make_run_dir(tmp_path / "run")
    monkeypatch.setattr(report.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3},
                        raising=False)
    calls = []
    real_pool = report.ProcessPoolExecutor
    monkeypatch.setattr(report, "ProcessPoolExecutor",
                        lambda *a, **k: calls.append(a) or real_pool(*a, **k))
    parallel = render_report(run, tmp_path / "parallel.html").read_text()
    assert calls and calls[0][0] >= 2          # more than one workload, more than one worker
    monkeypatch.setattr(report, "MAX_PLOT_WORKERS", 1)
    serial = render_report(run, tmp_path / "serial.html").read_text()
    assert len(calls) == 1 and parallel == serial
