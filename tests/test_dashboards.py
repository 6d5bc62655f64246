"""W&B dashboards as code: the specs ``ablate report`` writes, ``ablate dashboard`` against a
loopback GraphQL server (no W&B server is reachable here)."""

from __future__ import annotations

import gzip
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.study.results import read_study

pytestmark = pytest.mark.usefixtures("no_wandb")

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "norm_placement_wandb_workspace.json"


@pytest.fixture(scope="module")
def norm_pos(tmp_path_factory, norm_pos_store):
    """The synthetic 2-axis grid study (norm placement x positions, 3 seeds), loaded."""
    store = norm_pos_store(tmp_path_factory.mktemp("store"))
    return read_study(store, "norm_pos")


def _sections(spec: dict) -> dict[str, list[dict]]:
    sections = spec["spec"]["section"]["panelBankConfig"]["sections"]
    return {s["name"]: [p["config"] for p in s["panels"]] for s in sections}


def _same(a: dict, b: dict) -> bool:
    """Two workspace specs are the same but for the pinned columns' order, which the library
    reads back from a mapping in an order of its own."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    orders = [s["section"]["runSets"][0]["runFeed"].pop("columnOrder") for s in (a, b)]
    return sorted(orders[0]) == sorted(orders[1]) and a == b


def test_the_workspace_has_the_study_panels(norm_pos, monkeypatch):
    from ablate.report.dashboards import workspace_json

    for var in ("WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    spec = workspace_json(norm_pos)
    assert spec["project"] == "ablate" and spec["displayName"] == "ablate: norm_pos"
    sections = _sections(spec)
    val, train = sections["Loss curves (mean, min-max band over seeds, per variant)"]
    for panel, key in ((val, "val/loss"), (train, "train/loss")):
        assert panel["metrics"] == [key] and panel["xAxis"] == "trainer/global_step"
        assert (panel["groupAgg"], panel["groupArea"]) == ("mean", "minmax")
    (bar,) = sections["Final loss per variant"]
    assert bar["metrics"] == ["final_val_loss"] and bar["groupAgg"] == "mean"
    assert "not the curve's last point" in bar["chartTitle"]
    (par,) = sections["Grid"]  # two axes: parallel coordinates over them
    cols = [c["accessor"] for c in par["columns"]]
    assert cols == [
        "config:model.value.norm_placement",
        "config:model.value.pos_encoding",
        "summary:final_val_loss",
    ]
    (lengths,) = sections["Length extrapolation"]
    assert lengths["metrics"] == ["val_loss_at_1x", "val_loss_at_2x", "val_loss_at_4x"]
    layers, ffn = sections["Gradient norms per layer"]
    assert layers["metrics"] == [f"grad_norm/layer_{i:02d}" for i in range(4)]
    assert ffn["metrics"] == [f"grad_norm/ffn_out_{i:02d}" for i in range(4)]
    runset = spec["spec"]["section"]["runSets"][0]
    filters = json.dumps(runset["filters"])
    assert '"norm_pos"' in filters and '"report"' in filters  # the study's group, no report run
    assert runset["grouping"] == [{"section": "run", "name": "jobType"}]
    assert runset["runFeed"]["columnOrder"] == [
        "run:displayName",
        "config:model.value.norm_placement",
        "config:model.value.pos_encoding",
        "summary:final_val_loss",
        "summary:best_val_loss",
        "run:state",
        "run:tags",
    ]


def test_specs_round_trip_through_wandb_workspaces_models(norm_pos, tmp_path):
    """What ``ablate report`` writes reads back into wandb-workspaces' own models and
    serializes to the same JSON (nothing lost, nothing it cannot parse)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces.reports.v2 import internal as report_internal
    from wandb_workspaces.workspaces import internal

    from ablate.report import build_report

    report_md = build_report(norm_pos, tmp_path / "reports")
    folder = report_md.parent
    spec = json.loads((folder / "wandb_workspace.json").read_text())
    again = ws.Workspace._from_model(internal.View.model_validate(spec))._to_model()
    again = json.loads(again.model_dump_json(by_alias=True, exclude_none=True))
    assert _same(again["spec"], spec["spec"]) and again["displayName"] == spec["displayName"]

    report = json.loads((folder / "wandb_report.json").read_text())
    model = report_internal.ReportViewspec.model_validate(report)
    back = wr.Report._from_model(model)._to_model()
    assert json.loads(back.model_dump_json(by_alias=True, exclude_none=True)) == report
    # it mirrors report.md: its headings, its claims/tables as Markdown, each figure
    blocks = report["spec"]["blocks"]
    headings = [b["children"][0]["text"] for b in blocks if b["type"] == "heading"]
    md = report_md.read_text()
    assert headings and all(f"# {h}" in md for h in headings)
    figures = sorted(p.stem for p in folder.glob("*.png"))
    grids = [b for b in blocks if b["type"] == "panel-grid"]
    keys = sorted(
        k
        for g in grids
        for p in g["metadata"]["panelBankSectionConfig"]["panels"]
        for k in p["config"]["mediaKeys"]
    )
    assert figures and keys == [f"figures/{f}" for f in figures]


def test_golden_workspace_of_the_shipped_norm_placement_study(tmp_path, monkeypatch):
    """The workspace spec of the shipped norm_placement store (reports/gpu_runs) is the
    reviewed one in tests/golden; regenerate it with ABLATE_REGEN_GOLDEN=1 after a change."""
    import os

    from ablate.report.dashboards import workspace_json

    for var in ("WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    with tarfile.open(ROOT / "reports/gpu_runs/norm_placement_gpu_150steps_store.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    study = read_study(tmp_path, "norm_placement", ROOT / "studies/norm_placement.yaml")
    text = json.dumps(workspace_json(study), indent=1, sort_keys=True) + "\n"
    if os.environ.get("ABLATE_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


# --- ablate dashboard against a loopback W&B ---------------------------------------------------


class Loopback:
    """A W&B GraphQL endpoint on 127.0.0.1 that records every request and keeps the views
    upserted (an ``id`` in the variables updates that view; none creates one)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.views: dict[str, dict] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    raw = gzip.decompress(raw)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:  # the SDK's telemetry (protobuf): not ours to read
                    body = {}
                owner.requests.append(body)
                data = json.dumps(owner.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, body: dict) -> dict:
        query, v = body.get("query", ""), body.get("variables") or {}
        if "upsertView" in query:
            vid = v.get("id") or f"view-{len(self.views) + 1}"
            self.views[vid] = v
            view = {
                "id": vid,
                "name": v.get("name") or vid,
                "displayName": v.get("displayName", ""),
                "description": v.get("description", ""),
                "spec": v.get("spec"),
                "project": {"name": v.get("projectName"), "entityName": v.get("entityName")},
            }
            return {"data": {"upsertView": {"view": view, "inserted": "id" not in v}}}
        if "viewer" in query:
            viewer = {"id": "u1", "entity": "me", "username": "me", "flags": "{}"}
            return {"data": {"viewer": {**viewer, "teams": {"edges": []}}}}
        if "GetProjects" in query:
            node = {"id": "p1", "name": "ablate", "entityName": "me", "isBenchmark": False}
            node.update(createdAt="2026-01-01T00:00:00", user=None)
            page = {"hasNextPage": False, "endCursor": None}
            return {"data": {"models": {"edges": [{"node": node}], "pageInfo": page}}}
        return {"data": {}}

    def upserts(self) -> list[dict]:
        return [r["variables"] for r in self.requests if "upsertView" in r.get("query", "")]


@pytest.fixture
def loopback(monkeypatch, tmp_path):
    server = Loopback()
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield server
    server.server.shutdown()
    import wandb

    wandb.teardown()  # wandb.Api() kept the loopback's settings in wandb's process-wide setup


def test_dashboard_saves_the_specs_then_updates_them(norm_pos, loopback, tmp_path):
    from ablate.report.dashboards import write_specs

    store = norm_pos.path.parent
    (tmp_path / "reports" / "norm_pos").mkdir(parents=True)
    write_specs(norm_pos, [], tmp_path / "reports" / "norm_pos")
    args = ["dashboard", "norm_pos", "--store", str(store), "--out", str(tmp_path / "reports")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    ws_vars, report_vars = loopback.upserts()
    assert (ws_vars["entityName"], ws_vars["projectName"]) == ("me", "ablate")
    assert ws_vars["type"] == "project-view" and "id" not in ws_vars  # a new view
    assert ws_vars["displayName"] == "ablate: norm_pos"
    sent = json.loads(ws_vars["spec"])
    saved = json.loads((tmp_path / "reports/norm_pos/wandb_workspace.json").read_text())
    assert _same(sent, saved["spec"])  # the file that was reviewed is what is saved
    assert report_vars["type"] == "runs" and report_vars["id"] is None
    record = json.loads((store / "norm_pos" / "wandb_views.json").read_text())
    assert record["workspace"]["id"] == "view-1" and record["report"]["id"] == "view-2"
    assert record["workspace"]["url"].startswith(loopback.url + "/me/ablate?nw=")
    assert f"norm_pos workspace: {record['workspace']['url']}" in first.output

    study_yaml = tmp_path / "norm_pos.yaml"  # the study's YAML names it, as for `ablate report`
    study_yaml.write_text("name: norm_pos\n")
    second = CliRunner().invoke(app, ["dashboard", str(study_yaml), *args[2:]])
    assert second.exit_code == 0, second.output
    assert f"norm_pos workspace: {record['workspace']['url']}" in second.output
    ws2, report2 = loopback.upserts()[2:]
    assert ws2["id"] == "view-1" and ws2["name"] == record["workspace"]["name"]
    assert report2["id"] == "view-2"
    assert sorted(loopback.views) == ["view-1", "view-2"]  # updated, not duplicated


def test_dashboard_without_login_says_so_and_saves_nothing(norm_pos, tmp_path, monkeypatch):
    from ablate.report.dashboards import write_specs

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = norm_pos.path.parent
    views = store / "norm_pos" / "wandb_views.json"
    before = views.read_text() if views.exists() else None  # the module's store is shared
    (tmp_path / "reports" / "norm_pos").mkdir(parents=True)
    args = ["dashboard", "norm_pos", "--store", str(store), "--out", str(tmp_path / "reports")]
    missing = CliRunner().invoke(app, args)
    assert missing.exit_code == 2 and "run `ablate report norm_pos` first" in missing.output
    write_specs(norm_pos, [], tmp_path / "reports" / "norm_pos")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "no W&B login" in result.output
    assert (views.read_text() if views.exists() else None) == before
