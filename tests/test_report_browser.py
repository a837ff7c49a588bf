"""nanolm report in a real headless browser (Debian's chromium driven by Playwright): the page loads from a
file:// URL with no network, with zero console errors and zero requests besides the page itself; every
image decodes; every section and every table of the --json output is on the page with the same numbers;
it fits a laptop's width and prints to PDF. A screenshot of each page is written for the test log. The demo's
run (tests/test_demo.py makes it) opens on its results: status, headline numbers and the loss curves within the
first 800 px of a 1280 × 800 window; a screenshot of that first screen is written.

Skipped, with the reason, where Playwright's Python package or /usr/bin/chromium is missing
(`pip install 'nanolm[report]'`; `apt-get install chromium`). Playwright's own browser download is not used."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import pytest

from test_report import artifact_run, check_tables_match, copy_run, invoke

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1366, "height": 768}


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "Playwright's Python package is not installed (pip install 'nanolm[report]')"
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"no browser at {CHROMIUM} (as root: apt-get install -y chromium)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")

# The page's tables as the browser has them: id -> rows of cell texts.
TABLES_JS = """() => Object.fromEntries(Array.from(document.querySelectorAll('table')).map(t => [t.id,
    Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent))]))"""
IMAGES_JS = """() => Array.from(document.images).map(i => ({complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
    shown: i.getBoundingClientRect().width}))"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages(trained_run, tmp_path_factory):
    """(page, its --json output) for the run with artifacts, and for its comparison with a planted copy."""
    run = artifact_run(Path(trained_run), tmp_path_factory.mktemp("report-full"))
    where = tmp_path_factory.mktemp("report-browser")
    own = run / "browser.html"  # beside the run's files: its link to the trace resolves
    data = json.loads(invoke("report", str(run), "-o", str(own), "--json"))
    compare = where / "compare.html"
    compare_data = json.loads(invoke("report", "compare", str(run), str(run), "-o", str(compare), "--json"))
    return {"run": (own, data), "compare": (compare, compare_data)}


def open_offline(browser, path: Path, viewport: dict = LAPTOP):
    """The page loaded from its file:// URL in an offline context; (page, console errors, requests)."""
    context = browser.new_context(offline=True, viewport=viewport)
    page = context.new_page()
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, errors, requests


@pytest.mark.parametrize("which", ["run", "compare"])
def test_page_in_a_browser(browser, pages, which, tmp_path):
    path, data = pages[which]
    page, errors, requests = open_offline(browser, path)
    try:
        assert errors == []
        assert requests == [path.resolve().as_uri()]  # the page itself, nothing else
        images = page.evaluate(IMAGES_JS)
        assert len(images) == sum(len(s["figures"]) for s in data["sections"])
        assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 and i["shown"] > 0 for i in images), images
        shown = page.evaluate(
            "() => Array.from(document.querySelectorAll('main > section'))"
            ".filter(s => s.offsetHeight > 0).map(s => s.dataset.section)"
        )
        assert shown == [s["key"] for s in data["sections"]]
        assert check_tables_match(page.evaluate(TABLES_JS), data) > (100 if which == "run" else 5)
        # laptop width: nothing wider than the window (wide tables scroll inside their own box)
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot = tmp_path / f"report-{which}.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the {which} page: {shot}")
        assert shot.stat().st_size > 10_000
        page.emulate_media(media="print")
        assert page.evaluate("() => getComputedStyle(document.querySelector('nav')).display") == "none"
        pdf = page.pdf(format="A4")
        assert pdf.startswith(b"%PDF") and len(pdf) > 10_000
    finally:
        page.context.close()
    assert errors == [] and len(requests) == 1  # nothing more arrived while printing


# ---- a GPU run's profile -------------------------------------------------------------------------------

GPU_TRACE = Path(__file__).parent / "fixtures" / "gpu" / "seed_example.trace.json.gz"  # a real H200 trace


@pytest.fixture(scope="module")
def gpu_page(trained_run, tmp_path_factory):
    """(the page of a run whose profile is the recorded H200 trace's, its --json output, the profile's JSON, what
    the terminal printed for it)."""
    run = copy_run(Path(trained_run), tmp_path_factory.mktemp("gpu-run"))
    (run / "profiles").mkdir()
    profile = run / "profiles" / "last.json"
    terminal = invoke("profile", "analyze", str(GPU_TRACE), "--json", str(profile))
    page = run / "report.html"
    data = json.loads(invoke("report", str(run), "-o", str(page), "--json"))
    return page, data, json.loads(profile.read_text()), terminal


def test_a_gpu_runs_page_shows_the_gpu_table_the_terminal_shows(browser, gpu_page):
    """The page of a GPU run leads its profile with the GPU's answer and the table of where the step's time goes
    on the GPU, cell for cell the profile's numbers and the terminal's rows; then its launches and the syncs."""
    path, data, profile, terminal = gpu_page
    page, errors, _ = open_offline(browser, path)
    try:
        assert errors == []
        tables = page.evaluate(TABLES_JS)
        text = page.evaluate("() => document.querySelector('#sec-profile').innerText")
    finally:
        page.context.close()
    g = profile["gpu"]
    expected = [
        [r["name"] if r["kind"] != "busy" else f"busy: {r['name']}", f"{r['ms']:.2f}", f"{r['share']:.0%}"] for r in g["rows"]
    ]
    shown = tables["profile-gpu"]
    assert [row[:3] for row in shown] == [*expected, ["step", f"{g['step_ms']:.2f}", "100%"]]
    assert math.isclose(sum(r["ms"] for r in g["rows"]), g["step_ms"], rel_tol=1e-6)  # the rows tile the step
    flat = " ".join(terminal.split())  # the terminal's rows, wherever rich wrapped them
    for name, ms, _share in expected:
        assert f"{ms}" in flat and name.split(":")[-1].strip().split(" ")[0] in flat, name
    assert g["gate_sentence"] in " ".join(text.split())
    assert f"{g['kernels_per_step']:.0f} kernels a step" in text
    assert ("host-device syncs: none" in text) == (not profile["syncs"])
    assert check_tables_match(tables, data) > 20


# ---- the first screen ----------------------------------------------------------------------------------

FIRST_SCREEN = {"width": 1280, "height": 800}
BOXES_JS = """() => Object.fromEntries(Array.from(document.querySelectorAll('.number, figure img')).map(e => {
    const r = e.getBoundingClientRect(); return [e.id || e.closest('figure').id, {top: r.top, bottom: r.bottom,
    width: r.width, height: r.height}]; }))"""
WIDER_JS = """() => Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().width >
    window.innerWidth).map(e => e.tagName + '#' + e.id)"""


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory):
    """(the demo run's page, its --json output): the run `nanolm demo` leaves (a smaller model), profile included."""
    from test_demo import demo_at_80_columns

    run, _ = demo_at_80_columns(tmp_path_factory.mktemp("demo"))
    return run / "report.html", json.loads(invoke("report", str(run), "--json"))


def test_the_demo_runs_page_leads_with_its_results(browser, demo_page, tmp_path):
    path, data = demo_page
    results = data["sections"][0]
    assert [n["key"] for n in results["numbers"]] == ["status", "val-loss", "tokens-per-s", "mfu", "verdict"]
    page, errors, requests = open_offline(browser, path, FIRST_SCREEN)
    try:
        boxes = page.evaluate(BOXES_JS)
        for n in results["numbers"]:  # each headline number is on the first screen
            box = boxes[f"num-{n['key']}"]
            assert box["top"] >= 0 and box["bottom"] <= FIRST_SCREEN["height"] and box["width"] > 0, (n["key"], box)
            assert n["shown"] in page.inner_text(f"#num-{n['key']}")
        curve = boxes["fig-curves-loss"]  # and the loss curves, at about the size they were drawn (820 × 400)
        assert curve["bottom"] <= FIRST_SCREEN["height"] and curve["width"] >= 640 and curve["height"] >= 300, curve
        assert page.evaluate(WIDER_JS) == []  # nothing wider than the window
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        shot = tmp_path / "demo-first-screen.png"
        page.screenshot(path=str(shot))
        print(f"screenshot of the demo run's first screen: {shot}")
        assert shot.stat().st_size > 10_000
        # the provenance: last, folded, and opened by a click on its title
        assert (
            page.evaluate(
                "() => Array.from(document.querySelectorAll('main > section')).map(s => s.dataset.section).slice(-1)[0]"
            )
            == "provenance"
        )
        assert not page.is_visible("#provenance-config")
        page.click("#sec-provenance summary")
        assert page.is_visible("#provenance-config")
    finally:
        page.context.close()
    assert errors == [] and requests == [path.resolve().as_uri()]
