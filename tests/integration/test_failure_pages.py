"""A failure sheet in MLflow's own UI and the report's link to it (issue 47), in headless Chromium
against a real ``mlflow server``.

An evaluation run holds a sheet (``failures/<stem>.png`` and ``.html``, drawn by
:mod:`vsbench.reporting.sheets` from a synthetic DISC) and a second evaluation holds none. The report
built from the experiment must link the first model's sheet and nothing for the second; the link,
opened in Chromium, must be the run's Artifacts tab listing both files with the HTML page rendered
(its title, every thumbnail decoded), and the PNG link must draw the PNG. The HTML page is shown in
an iframe of its own process (MLflow sandboxes it), so the page is driven through Chromium's
DevTools protocol, which reaches into that frame. ``VSBENCH_UPDATE_SCREENSHOT=1`` copies the
screenshot of the HTML page to docs/img/mlflow-failures.png (docs/tracking.md's picture).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from vsbench.reporting.html_report import write_report
from vsbench.reporting.record_sheets import titled
from vsbench.reporting.runs import FailureSheets, collect_runs
from vsbench.reporting.sheets import Row, Sheet, Tile, image_in_root, write_sheet
from vsbench.tracking.evaluations import Embedder, evaluations_of, log_evaluations
from vsbench.tracking.failures import FAILURES_DIR
from vsbench.tracking.runs import close_parent_run, open_parent_run
from vsbench.tracking.sheet_stamp import STAMP_HEIGHT

pytestmark = pytest.mark.integration

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "mlflow-failures.png"
STEM = "disc-Flat-none"
WINDOW = (1400, 900)


def _sheet(root: Path) -> Sheet:
    """Two worst queries of a synthetic DISC, as a retrieval sheet draws them: the query, its top 3
    (scores, ranks) and the true match marked."""
    def tile(path: str, mark: str, *caption: str) -> Tile:
        found, why = image_in_root(root, path)
        return Tile(found, caption, mark, why)

    return Sheet("disc Flat none: worst queries (true match ranked lowest or missing from the top 3)", (
        Row("Q00000: true match R000002 not in the top 3", (
            tile("val_query/Q00000.jpg", "query", "Q00000"), tile("val_ref/R000005.jpg", "false", "R000005", "0.912", "rank 1"),
            tile("val_ref/R000001.jpg", "false", "R000001", "0.871", "rank 2"),
            tile("val_ref/R000003.jpg", "false", "R000003", "0.640", "rank 3"),
            tile("val_ref/R000002.jpg", "true", "R000002", "not in the top 3"))),
        Row("Q00001: true match R000004 at rank 2", (
            tile("val_query/Q00001.jpg", "query", "Q00001"), tile("val_ref/R000000.jpg", "false", "R000000", "0.803", "rank 1"),
            tile("val_ref/R000004.jpg", "true", "R000004", "0.795", "rank 2"),
            tile("val_ref/R000005.jpg", "false", "R000005", "0.511", "rank 3"))),
    ), total=2)


class _Chromium:
    """Headless Chromium driven through its DevTools protocol: one page, and the out-of-process frames
    it opens (auto-attached, flattened onto the page's socket)."""

    def __init__(self, profile: Path, window: tuple[int, int] = WINDOW) -> None:
        import websocket

        from .test_report_browser import _chromium

        self._process = subprocess.Popen(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = profile / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().strip()):
                assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
                time.sleep(0.2)
            with urllib.request.urlopen(f"http://127.0.0.1:{port_file.read_text().split()[0]}/json/list",
                                        timeout=30) as answer:
                [page] = [target for target in json.load(answer) if target["type"] == "page"]
            self._socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        except BaseException:
            self.close()
            raise
        self._asked = 0
        self.frames: list[str] = []  # sessions of the frames attached so far (iframes in their own process)
        self.send("Emulation.setDeviceMetricsOverride", width=window[0], height=window[1], deviceScaleFactor=1,
                  mobile=False)  # the viewport itself (the window's size holds the browser's own frame)
        self.send("Page.enable")
        self.send("Target.setAutoAttach", autoAttach=True, waitForDebuggerOnStart=False, flatten=True)

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._asked += 1
        message: dict[str, Any] = {"id": self._asked, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._socket.send(json.dumps(message))
        while True:
            reply = json.loads(self._socket.recv())
            if reply.get("method") == "Target.attachedToTarget":
                self.frames.append(reply["params"]["sessionId"])
            elif reply.get("id") == self._asked:
                assert "error" not in reply or session, reply  # a frame's session ends with its page
                return reply.get("result", {})

    def value(self, expression: str, session: str | None = None) -> Any:
        """A JavaScript expression's value (JSON-able) in the page, or in an attached frame."""
        result = self.send("Runtime.evaluate", session, expression=f"JSON.stringify({expression})",
                           returnByValue=True).get("result", {})
        return json.loads(result["value"]) if "value" in result else None

    def wait(self, expression: str, what: str, timeout: float = 90.0) -> Any:
        """Poll ``expression`` in the page until it is truthy (the UI loads in several requests)."""
        deadline = time.monotonic() + timeout
        while not (found := self.value(expression)):
            assert time.monotonic() < deadline, f"{what}: not shown within {timeout:.0f} s"
            time.sleep(0.3)
        return found

    def open(self, url: str) -> None:
        self.send("Page.navigate", url="about:blank")  # a new hash alone would not reload the UI
        self.send("Page.navigate", url=url)

    def screenshot(self, path: Path) -> Path:
        # MLflow 3.17 opens its Assistant panel beside every page: closed, the artifact has the width.
        self.value("Array.from(document.querySelectorAll('button[aria-label=Close]')).forEach(b => b.click()) || 1")
        time.sleep(0.5)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        if getattr(self, "_socket", None) is not None:
            self._socket.close()
        self._process.terminate()
        self._process.wait(timeout=30)


def _report_links(page: str) -> dict[str, list[str]]:
    """model -> the hrefs in its cell of the report's failure row (one leaderboard table)."""
    head = re.search(r'<table class="leaderboard".*?<thead><tr>(.*?)</tr>', page, re.S).group(1)
    models = [m.replace("<wbr>", "") for m in re.findall(r"<th[^>]*>(.*?)</th>", head)[2:]]
    row = re.search(r'<tr class="failures">(.*?)</tr>', page, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[2:]
    return {model: [href.replace("&amp;", "&") for href in re.findall(r'href="([^"]+)"', cell)]
            for model, cell in zip(models, cells)}


def test_the_report_links_the_sheet_and_mlflow_shows_it_under_the_evaluation(mlflow_tracking, fresh_experiment,
                                                                              tmp_path):
    from vsbench.benchmarks.disc.synth import generate_disc

    root = tmp_path / "disc"
    generate_disc(root, references=6, queries=4, train=1)
    # Titled as the score titles it (benchmark, model as MLflow names it, variant), and logged by the
    # evaluation's own logging, which stamps the copy with the run it lands in (issue 57).
    sheet = titled(_sheet(root), "disc · efficientnet_lite0-random · Flat · none")
    written = write_sheet(sheet, tmp_path / "out" / FAILURES_DIR, STEM)
    files = {entry["path"]: entry["sha256"] for entry in written["files"].values()}

    client = MlflowClient()
    parent = open_parent_run(fresh_experiment, "kfp-failures", "vsbench-similarity", {})
    runs = {}
    for model, options, uap in (("efficientnet_lite0", {"weights": "random"}, 0.41), ("resnet34", {}, 0.52)):
        evaluations = evaluations_of("disc", [{"codec": "Flat", "score_norm": "none", "uap": uap}],
                                     Embedder(model=model, options=options), run_params={"codecs": "Flat", "k": 3},
                                     data_digest="cd" * 32, failures=[files if options else {}])
        [runs[model]] = log_evaluations(client, parent, evaluations)
    assert close_parent_run(fresh_experiment, "kfp-failures", succeeded=True) == parent

    report = write_report(collect_runs(fresh_experiment), tmp_path / "report.html", title="failures",
                          sheets=FailureSheets(client)).read_text()
    links = _report_links(report)
    assert links["resnet34 · Flat · none"] == []  # no sheet logged: nothing linked
    page, png = links["efficientnet_lite0-random · Flat · none"]
    assert f"/runs/{runs['efficientnet_lite0']}/artifacts/{FAILURES_DIR}/{STEM}.html?" in page
    assert f"/runs/{runs['efficientnet_lite0']}/artifacts/{FAILURES_DIR}/{STEM}.png?" in png

    browser = _Chromium(tmp_path / "profile")
    try:
        browser.open(page)
        listed = browser.wait(f"document.body.innerText.split('\\n').filter(t => t === '{STEM}.html' || t === '{STEM}.png')",
                              "the run's failures/ in the Artifacts tab")
        assert set(listed) == {f"{STEM}.html", f"{STEM}.png"}
        browser.wait("document.querySelector('iframe.mlflow-html-iframe') !== null", "the HTML preview")
        tiles = sum(len(row.tiles) for row in sheet.rows)
        shown = None
        deadline = time.monotonic() + 60
        while shown is None or shown[1] != [True] * tiles:  # the page's own frame: title and every thumbnail
            assert time.monotonic() < deadline, f"the sheet did not render in MLflow's preview: {shown}"
            time.sleep(0.3)
            for frame in browser.frames:
                shown = browser.value("[document.title, Array.from(document.images).map(i => i.complete && "
                                      "i.naturalWidth > 0)]", frame) or shown
        # What a person reads at the top of the page: which benchmark, model and variant, and which run.
        run_id = runs["efficientnet_lite0"]
        assert shown[0] == f"{sheet.title} · run {run_id}"
        assert shown[0].startswith("disc · efficientnet_lite0-random · Flat · none: worst queries")
        heading = browser.value("[document.querySelector('h1').innerText, document.querySelector('p.run').innerText]",
                                next(f for f in browser.frames
                                     if browser.value("document.querySelector('p.run') !== null", f)))
        assert heading[0] == sheet.title and heading[1] == f"MLflow run {run_id} (efficientnet_lite0-random · Flat · none)"
        html_shot = browser.screenshot(tmp_path / "mlflow-failures-html.png")

        browser.open(png)
        with Image.open(BytesIO(Path(written["files"]["png"]["path"]).read_bytes())) as drawn:
            size = [drawn.size[0], drawn.size[1] + STAMP_HEIGHT]  # the logged copy: one line more, the run
        browser.wait(f"Array.from(document.images).some(i => i.naturalWidth === {size[0]} && "
                     f"i.naturalHeight === {size[1]})", "the PNG sheet drawn in the Artifacts tab")
        browser.screenshot(tmp_path / "mlflow-failures-png.png")
    finally:
        browser.close()

    with Image.open(html_shot) as image:
        assert image.size == WINDOW
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200, "the screenshot is nearly uniform: the page did not render"
    if os.environ.get("VSBENCH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(html_shot, SCREENSHOT)
    print(f"screenshots: {tmp_path}")
