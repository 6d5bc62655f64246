"""report.html in a real browser (headless Chromium): at 1280x800 the first screen shows the
Answer table, no table needs its horizontal scrollbar (the collapsed provenance opened too), and
every figure loads. Skipped only where no Chromium is installed (Debian: ``apt-get install
chromium``; CI's ``.ci/run`` installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from ablate.report import build_reports
from ablate.store import RunStore

NORM, WARM = "model.norm_placement", "optim.warmup_ratio"
PROBE = """<script>addEventListener("load", () => {
  const answer = document.querySelector('[data-table="answer"]').getBoundingClientRect();
  document.querySelectorAll("details").forEach((d) => (d.open = true));
  const wide = [...document.querySelectorAll(".table-wrap")]
    .filter((w) => w.scrollWidth > w.clientWidth)
    .map((w) => w.querySelector("th").textContent);
  const images = [...document.images];
  document.body.dataset.probe = JSON.stringify({
    top: answer.top, bottom: answer.bottom, height: innerHeight, width: innerWidth, wide,
    images: images.length, loaded: images.filter((i) => i.complete && i.naturalWidth > 0).length,
    page: document.documentElement.scrollWidth,
  });
});</script>"""


@pytest.fixture
def page(tmp_path, write_run):
    """A 2x2 study with four claims (an equivalence and an interaction among them) and the
    real variant labels: long, with commas."""
    store = tmp_path / "runs"
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for wr in (0.0, 0.1):
            for seed in range(3):
                axes = {NORM: norm, WARM: wr}
                final = base + 0.013 * seed * (1 + wr) + (0.2 if (norm, wr) == ("post", 0.0) else 0)
                write_run(store, "nw", axes, seed, "completed", final)
    for d in RunStore(store).runs("nw"):
        data = d.read_run()
        label = ",".join(f"{k.split('.')[1]}={v}" for k, v in data["meta"]["axes"].items())
        d.run_file.unlink()
        d.write_run(data["config"], data["meta"] | {"variant": label})
    claims = [
        {"id": "post-needs-warmup", "expect": "better", "a": {WARM: 0.1}, "b": {WARM: 0.0}}
        | {"where": {NORM: "post"}},
        {"id": "pre-needs-no-warmup", "expect": "equivalent", "a": {WARM: 0.0}, "b": {WARM: 0.1}}
        | {"where": {NORM: "pre"}, "margin": 0.03},
        {"id": "pre-beats-post-without-warmup", "expect": "better", "a": {NORM: "pre"}}
        | {"b": {NORM: "post"}, "where": {WARM: 0.0}},
        {"id": "pre-ln-shrinks-warmup-penalty", "expect": "smaller", "a": {WARM: 0.0}}
        | {"b": {WARM: 0.1}, "by": {NORM: ["pre", "post"]}},
    ]
    for c in claims:
        c["text"] = f"{c['id'].replace('-', ' ')}, as the paper states it (Xiong et al. 2020)"
    spec = tmp_path / "nw.yaml"
    grid = {NORM: ["post", "pre"], WARM: [0.0, 0.1]}
    spec.write_text(
        yaml.safe_dump(
            {"name": "nw", "description": "Does Post-LN need warmup?", "grid": grid}
            | {"seeds": [0, 1, 2], "claims": claims}
        )
    )
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "reports", quiet=True)
    return path.parent / "report.html"


def test_the_first_screen_shows_the_answer_and_nothing_needs_a_scrollbar(page, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    html = page.read_text()
    figures = html.count("<figure>")
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"]
    args += ["--virtual-time-budget=5000", "--dump-dom", probe.as_uri()]
    dom = subprocess.run(args, capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    seen = json.loads(found[1].replace("&quot;", '"'))
    assert seen["width"] == 1280 and seen["page"] <= seen["width"]  # no page-wide scrollbar
    assert 0 < seen["top"] < seen["bottom"] <= seen["height"], seen  # the whole Answer table
    assert seen["wide"] == [], seen  # no table needs its own scrollbar
    assert figures >= 6 and seen["images"] == seen["loaded"] == figures, seen
