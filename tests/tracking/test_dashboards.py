"""W&B dashboards as code: the specs ``ablate report`` writes, ``ablate dashboard`` against a
loopback GraphQL server (no W&B server is reachable here)."""

from __future__ import annotations

import gzip
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.results import read_study

pytestmark = pytest.mark.usefixtures("no_wandb")

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parents[1] / "golden" / "norm_placement_wandb_workspace.json"


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
    from ablate.store import RunDir
    from ablate.tracking.ids import wandb_run_id

    for var in ("WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    spec = workspace_json(norm_pos)
    assert spec["project"] == "ablate" and spec["displayName"] == "ablate: norm_pos"
    sections = _sections(spec)
    val, train = sections["Loss curves (mean, min-max band over the seeds of each variant)"]
    for panel, key in ((val, "val/loss"), (train, "train/loss")):
        assert panel["metrics"] == [key] and panel["xAxis"] == "trainer/global_step"
        assert (panel["groupAgg"], panel["groupArea"]) == ("mean", "minmax")
        assert panel["limit"] == 12  # every run (group) of the study, not W&B's default 10
    (bar,) = sections["Final loss per variant"]
    assert bar["metrics"] == ["final_val_loss"] and bar["groupAgg"] == "mean"
    assert "not the curve's last point" in bar["chartTitle"]
    (par,) = sections["Axes"]  # two axes: parallel coordinates over them
    cols = [c["accessor"] for c in par["columns"]]
    assert cols == [
        "config:model.value.norm_placement",
        "config:model.value.pos_encoding",
        "summary:final_val_loss",
    ]
    (lengths,) = sections["Length extrapolation"]
    assert lengths["metrics"] == ["val_loss_at_1x", "val_loss_at_2x", "val_loss_at_4x"]
    # a section per logged metric family
    assert [p["metrics"] for p in sections["Validation perplexity and bits"]] == [["val/ppl"]]
    assert [p["metrics"] for p in sections["Learning rate"]] == [["lr"]]
    norm, layers, ffn = sections["Gradient norms"]
    assert norm["metrics"] == ["grad_norm/global"]
    assert layers["metrics"] == [f"grad_norm/layer_{i:02d}" for i in range(4)]
    assert ffn["metrics"] == [f"grad_norm/ffn_out_{i:02d}" for i in range(4)]
    settings = spec["spec"]["section"]["settings"]
    assert settings["maxRuns"] == 12 and settings["xAxis"] == "trainer/global_step"
    runset = spec["spec"]["section"]["runSets"][0]
    filters = {f["key"]["name"]: (f["op"], f["value"]) for f in runset["filters"]["filters"]}
    ids = sorted(wandb_run_id(RunDir(norm_pos.path / r)) for r in norm_pos.runs["run_id"])
    assert filters == {"group": ("=", "norm_pos"), "jobType": ("=", "train"), "name": ("IN", ids)}
    # by variant, then by how each run ended: a diverged or running run is outside the band
    assert runset["grouping"] == [
        {"section": "config", "name": "meta.value.variant"},
        {"section": "summary", "name": "status"},
    ]
    assert runset["runFeed"]["columnOrder"] == [
        "run:displayName",
        "config:model.value.norm_placement",
        "config:model.value.pos_encoding",
        "config:train.value.seed",
        "summary:status",
        "run:state",
        "summary:final_val_loss",
        "summary:best_val_loss",
        "tags:__ALL__",
    ]


def test_a_24_variant_grid_shows_every_variant_and_one_axis_gets_no_parallel_plot(
    tmp_path, write_run
):
    """W&B shows 10 runs or groups per panel by default: a 4 x 6 grid shows all 24 variants;
    a study that varies one axis gets no parallel coordinates (they would repeat the bars)."""
    from ablate.report.dashboards import report_json, workspace_json
    from ablate.report.render import Block

    for batch in (8, 16, 32, 64):
        for lr in (4e-4, 1e-3, 2.5e-3, 6.3e-3, 1.6e-2, 4e-2):
            axes = {"data.batch_size": batch, "optim.lr": lr}
            write_run(tmp_path, "grid24", axes, 0, "completed", 1.5 + lr)
            write_run(tmp_path, "oneaxis", {"optim.lr": lr}, 0, "completed", 1.5 + lr)
    grid = read_study(tmp_path, "grid24")
    spec = workspace_json(grid)
    assert spec["spec"]["section"]["settings"]["maxRuns"] >= 24
    panels = [p for ps in _sections(spec).values() for p in ps]
    assert all(p.get("limit", 24) >= 24 for p in panels) and "Axes" in _sections(spec)
    # the batch size varies: loss per token seen, not per step
    assert {p["xAxis"] for p in panels if "xAxis" in p} == {"tokens"}
    figure = Block("fig", tmp_path / "val_loss_curves.png", "caption")
    report = report_json(grid, [Block("h2", "Figures"), figure])
    (grid_block,) = [b for b in report["spec"]["blocks"] if b["type"] == "panel-grid"]
    lines = grid_block["metadata"]["panelBankSectionConfig"]["panels"]
    assert [p["config"]["limit"] >= 24 for p in lines] == [True, True]
    one = workspace_json(read_study(tmp_path, "oneaxis"))
    assert "Axes" not in _sections(one)


def test_a_run_retrained_as_stale_enters_the_views_once(tmp_path, write_run):
    """``--rerun-stale`` moves a run to ``.stale/`` and trains it again under a new W&B id;
    its old W&B run keeps the study's group in W&B, so the views name the runs' ids: the
    retrained one's, never the stale one's."""
    import shutil

    from ablate.report.dashboards import study_view
    from ablate.store import RunStore
    from ablate.store.provenance import STALE_DIR
    from ablate.tracking.ids import wandb_run_id

    for seed in (0, 1):
        write_run(tmp_path, "st", {"model.activation": "relu"}, seed, "completed", 1.5)
    first, second = RunStore(tmp_path).runs("st")
    seed, old = first.read_summary()["seed"], wandb_run_id(first)
    (tmp_path / "st" / STALE_DIR).mkdir()
    shutil.move(first.path, tmp_path / "st" / STALE_DIR / f"{first.run_id}-1700000000")
    write_run(tmp_path, "st", {"model.activation": "relu"}, seed, "completed", 1.5)  # retrained
    view = study_view(read_study(tmp_path, "st"))
    new = wandb_run_id(RunStore(tmp_path).run("st", first.run_id))
    assert new != old and sorted(view.run_ids) == sorted([new, wandb_run_id(second)])


def test_the_report_charts_the_runs_and_embeds_the_verdicts(norm_pos, tmp_path, monkeypatch):
    """The Report's figures of the runs are live panel grids over the study's runs, its
    comparisons the report run's W&B Table, its run table the study's; every run set names
    the entity and project, and building it asks no server."""
    from ablate.report import build_report

    monkeypatch.setenv("WANDB_ENTITY", "lab")
    monkeypatch.setenv("WANDB_PROJECT", "proj")
    asked = []
    import wandb_workspaces.reports.v2.interface as interface

    monkeypatch.setattr(interface, "execute_graphql", lambda *a, **k: asked.append(a))
    folder = build_report(norm_pos, tmp_path / "reports").parent
    report = json.loads((folder / "wandb_report.json").read_text())
    assert not asked
    assert report["project"] == {"entityName": "lab", "name": "proj"}
    grids = [b["metadata"] for b in report["spec"]["blocks"] if b["type"] == "panel-grid"]
    kinds = [[p["viewType"] for p in g["panelBankSectionConfig"]["panels"]] for g in grids]
    assert ["Run History Line Plot", "Run History Line Plot"] in kinds
    assert ["Bar Chart", "Parallel Coordinates Plot"] in kinds
    assert ["Weave"] in kinds and [] in kinds  # the verdicts table; the run table
    for g in grids:
        (runset,) = g["runSets"]
        assert runset["project"] == {"entityName": "lab", "name": "proj"}
        filters = {f["key"]["name"]: f["value"] for f in runset["filters"]["filters"]}
        assert filters["group"] == "norm_pos"
        if filters["jobType"] == "train":  # the study's runs: by variant, then status
            assert len(filters["name"]) == len(norm_pos.runs)
            assert [k["name"] for k in runset["grouping"]] == ["meta.value.variant", "status"]
            assert "config:train.value.seed" in runset["runFeed"]["columnOrder"]
        else:
            assert filters == {"group": "norm_pos", "jobType": "report", "name": _report_id()}
    (weave,) = [g for g, k in zip(grids, kinds, strict=True) if k == ["Weave"]]
    (panel,) = weave["panelBankSectionConfig"]["panels"]
    assert _table_name(panel) == "verdicts" and weave["hideRunSets"] is True


def _report_id() -> str:
    from ablate.tracking.ids import report_run_id

    return report_run_id("norm_pos")


def _is_table(panel: dict) -> bool:
    return panel["viewType"] == "Weave"


def _table_name(panel: dict) -> str:
    """The W&B Table a Weave summary-table panel shows: ``runs.summary[<name>]``."""
    return panel["config"]["panel2Config"]["exp"]["fromOp"]["inputs"]["key"]["val"]


def test_specs_round_trip_through_wandb_workspaces_models(norm_pos, tmp_path, monkeypatch):
    """What ``ablate report`` writes reads back into wandb-workspaces' own models and
    serializes to the same JSON (nothing lost, nothing it cannot parse)."""
    import wandb_workspaces.reports.v2.interface as interface
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces.workspaces import internal

    from ablate.report import build_report
    from ablate.tracking.views import report_object

    monkeypatch.setenv("WANDB_ENTITY", "lab")  # a run set names its project with an entity
    report_md = build_report(norm_pos, tmp_path / "reports")
    folder = report_md.parent
    spec = json.loads((folder / "wandb_workspace.json").read_text())
    again = ws.Workspace._from_model(internal.View.model_validate(spec))._to_model()
    again = json.loads(again.model_dump_json(by_alias=True, exclude_none=True))
    assert _same(again["spec"], spec["spec"]) and again["displayName"] == spec["displayName"]

    report = json.loads((folder / "wandb_report.json").read_text())
    # a Report object serializing a run set that names its project asks the server for the
    # project's internal id (`ablate dashboard` saves it so: tested against a loopback below)
    asked = []

    def server(api, query, variables):
        asked.append(variables)
        return {"project": {"internalId": "p-1"}}

    monkeypatch.setattr(interface, "execute_graphql", server)
    monkeypatch.setattr(interface, "_get_api", lambda: None)
    back = report_object(report, "lab")._to_model()  # what `ablate dashboard` saves
    back = json.loads(back.model_dump_json(by_alias=True, exclude_none=True))
    for block in back["spec"]["blocks"]:
        for runset in block.get("metadata", {}).get("runSets", []):
            assert runset["project"].pop("id") == "p-1"
    assert back == report
    assert asked and all(v == {"entityName": "lab", "projectName": "ablate"} for v in asked)
    # it mirrors report.md and provenance.md: their headings, their text, each figure
    blocks = report["spec"]["blocks"]
    headings = [b["children"][0]["text"] for b in blocks if b["type"] == "heading"]
    md = report_md.read_text() + (folder / "provenance.md").read_text()
    assert headings and all(f"# {h}" in md for h in headings)
    figures = sorted(p.stem for p in folder.glob("*.png"))
    grids = [b for b in blocks if b["type"] == "panel-grid"]
    keys = sorted(
        k
        for g in grids
        for p in g["metadata"]["panelBankSectionConfig"]["panels"]
        for k in p["config"].get("mediaKeys", [])
    )
    live = {"val_loss_curves", "final_val_loss", "length_extrapolation"}
    assert figures and keys == [f"figures/{f}" for f in figures if f not in live]


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
        if "ProjectInternalId" in query:
            return {"data": {"project": {"id": "p1", "internalId": "p1"}}}
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
    from ablate.report import build_report

    store = norm_pos.path.parent
    build_report(norm_pos, tmp_path / "reports")  # no W&B login then: the entity is empty
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
    report = json.loads((tmp_path / "reports/norm_pos/wandb_report.json").read_text())
    sent = json.loads(report_vars["spec"])
    grids = [b["metadata"] for b in sent["blocks"] if b["type"] == "panel-grid"]
    assert len(grids) == len([b for b in report["spec"]["blocks"] if b["type"] == "panel-grid"])
    for g in grids:  # the login's entity, the project's id as the server gave it
        assert [r["project"] for r in g["runSets"]] == [
            {"entityName": "me", "name": "ablate", "id": "p1"}
        ]
    tables = [p for g in grids for p in g["panelBankSectionConfig"]["panels"] if _is_table(p)]
    assert [p["layout"]["w"] for p in tables] == [24]  # the layout of the spec, kept
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


def test_dashboard_to_a_server_that_never_answers_ends_in_one_line(
    norm_pos, tmp_path, silent_wandb_server
):
    from ablate.report.dashboards import write_specs

    store = norm_pos.path.parent
    views = store / "norm_pos" / "wandb_views.json"
    before = views.read_text() if views.exists() else None  # the module's store is shared
    (tmp_path / "reports" / "norm_pos").mkdir(parents=True)
    write_specs(norm_pos, [], tmp_path / "reports" / "norm_pos")
    args = ["dashboard", "norm_pos", "--store", str(store), "--out", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"W&B server {silent_wandb_server} did not answer within 1 s" in result.output
    assert "nothing saved; retry with `ablate dashboard norm_pos`" in result.output
    assert (views.read_text() if views.exists() else None) == before


# --- every key the views name is one the runs log (real offline runs, decoded) -------------

TINY_CLAIMS = [
    {
        "id": "gelu-better",
        "text": "gelu beats relu",
        "expect": "better",
        "a": {"model.activation": "gelu"},
        "b": {"model.activation": "relu"},
    }
]


@pytest.fixture(scope="module")
def tiny_offline(tmp_path_factory, tiny_studies):
    """Two tiny studies trained with W&B offline and reported (their report runs offline
    too): a grid (activation x batch size, 2 seeds, one claim) and a study of two named
    variants of other widths and depths (one axis, ``variant``). Returns (store, reports)."""
    from ablate.execution.runner import run_study
    from ablate.report import build_report

    root = tmp_path_factory.mktemp("offline")
    store, reports = root / "runs", root / "reports"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("HOME", str(root / "home"))  # no login, no W&B settings file
        for var in ("WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY"):
            mp.delenv(var, raising=False)
        base = tiny_studies.base(max_steps=10, eval_interval=5, grad_norm_interval=5)
        base["tracking"] = {"wandb": True, "mode": "offline"}
        corpus = tiny_studies.corpus(root / "corpus.txt", 400)
        grid = {"model.activation": ["relu", "gelu"], "data.batch_size": [4, 8]}
        variants = [
            {"name": "narrow", "set": {"model.d_model": 16}},
            {"name": "wide", "set": {"model.d_model": 24, "model.n_layers": 2}},
        ]
        paths = [
            tiny_studies.study(root, base, corpus, "tinygrid", grid=grid, seeds=[0, 1]),
            tiny_studies.study(root, base, corpus, "tinyvar", variants=variants, seeds=[0, 1]),
        ]
        spec = yaml.safe_load(paths[0].read_text())
        paths[0].write_text(yaml.safe_dump({**spec, "claims": TINY_CLAIMS}, sort_keys=False))
        for path in paths:
            run_study(path, store=store, progress=False)
            build_report(read_study(store, path.stem, path), reports)
    return store, reports


def _logged(store: Path, study: str, read_wandb_file) -> SimpleNamespace:
    """What the study's offline W&B runs (and its report run) logged, decoded from their
    ``.wandb`` files: the newest start of each run, as ``ablate sync`` uploads it."""
    from ablate.tracking.sync import offline_runs

    runs, report = [], None
    for r in offline_runs(store, study):
        decoded = read_wandb_file(next(r.folder.glob("*.wandb")))
        if r.name == "report":
            report = decoded
        else:
            runs.append(decoded)
    assert runs and report is not None
    return SimpleNamespace(
        runs=runs,
        report=report,
        history={k for w in runs for k in w.history},
        summary={k for w in runs for k in w.summary},
    )


def _config_has(config: dict, name: str) -> bool:
    """``name`` (W&B's ``top.value.rest`` path) is a key of the decoded ``config``."""
    top, _, rest = name.partition(".value")
    node = config.get(top)
    for part in [p for p in rest.split(".") if p]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return top in config


RUN_FIELDS = {"displayName", "state", "tags", "name", "group", "jobType"}


def _check_key(section: str, name: str, logged: SimpleNamespace) -> None:
    if section == "config":
        assert any(_config_has(w.config, name) for w in logged.runs), f"config {name}"
    elif section == "summary":
        assert name in logged.summary, f"summary {name}"
    elif section == "run":
        assert name in RUN_FIELDS, f"run {name}"
    elif section == "tags":
        assert name == "__ALL__", f"tags {name}"
    else:
        raise AssertionError(f"unknown section {section}:{name}")


def _check_runset(runset: dict, logged: SimpleNamespace, study: str) -> None:
    """The run set's filters select exactly the study's runs (or its report run), and its
    grouping, sort and columns name logged keys."""
    filters = {f["key"]["name"]: (f["op"], f["value"]) for f in runset["filters"]["filters"]}
    assert filters["group"] == ("=", study)
    assert {w.run.run_group for w in (*logged.runs, logged.report)} == {study}
    if filters["jobType"] == ("=", "report"):
        assert filters["name"] == ("=", logged.report.run.run_id)
        assert logged.report.run.job_type == "report"
        return
    assert filters["jobType"] == ("=", "train")
    assert {w.run.job_type for w in logged.runs} == {"train"}
    op, ids = filters["name"]
    assert op == "IN" and sorted(ids) == sorted(w.run.run_id for w in logged.runs)
    for key in [*runset["grouping"], *(k["key"] for k in runset["sort"]["keys"])]:
        _check_key(key["section"], key["name"], logged)
    for column in runset["runFeed"]["columnOrder"]:
        _check_key(*column.split(":", 1), logged)


def _check_panel(panel: dict, logged: SimpleNamespace) -> None:
    kind, config = panel["viewType"], panel["config"]
    if kind == "Run History Line Plot":
        for key in [*config["metrics"], config["xAxis"]]:
            assert key in logged.history, f"history {key}"
    elif kind == "Bar Chart":
        for key in config["metrics"]:
            assert key in logged.summary, f"summary {key}"
    elif kind == "Parallel Coordinates Plot":
        for column in config["columns"]:
            _check_key(*column["accessor"].split(":", 1), logged)
    elif kind == "Media Browser":
        for key in config["mediaKeys"]:
            assert logged.report.summary.get(f"{key}/_type") == "image-file", key
    elif kind == "Weave":
        assert logged.report.summary.get(f"{_table_name(panel)}/_type") == "table-file"
    else:
        raise AssertionError(f"unchecked panel {kind}")


@pytest.mark.parametrize("study", ["tinygrid", "tinyvar"])
def test_every_key_the_views_name_is_logged_by_the_runs(study, tiny_offline, read_wandb_file):
    store, reports = tiny_offline
    logged = _logged(store, study, read_wandb_file)
    workspace = json.loads((reports / study / "wandb_workspace.json").read_text())
    section = workspace["spec"]["section"]
    assert section["settings"]["xAxis"] in logged.history
    panels = [p for s in section["panelBankConfig"]["sections"] for p in s["panels"]]
    for s in section["panelBankConfig"]["sections"]:
        assert s["localPanelSettings"]["xAxis"] in logged.history
    for panel in panels:
        _check_panel(panel, logged)
    (runset,) = section["runSets"]
    _check_runset(runset, logged, study)
    # every logged metric family is shown
    shown = {k for p in panels for k in p["config"].get("metrics", [])}
    families = {k.split("/")[0] for k in logged.history if not k.startswith(("_", "trainer/"))}
    assert families - {"tokens"} <= {k.split("/")[0] for k in shown}

    report = json.loads((reports / study / "wandb_report.json").read_text())
    grids = [b["metadata"] for b in report["spec"]["blocks"] if b["type"] == "panel-grid"]
    for g in grids:
        for runset in g["runSets"]:
            _check_runset(runset, logged, study)
        for panel in g["panelBankSectionConfig"]["panels"]:
            _check_panel(panel, logged)
    kinds = {p["viewType"] for g in grids for p in g["panelBankSectionConfig"]["panels"]}
    assert {"Run History Line Plot", "Bar Chart", "Weave"} <= kinds
    tables = {
        _table_name(p) for g in grids for p in g["panelBankSectionConfig"]["panels"] if _is_table(p)
    }
    if study == "tinygrid":  # two axes, the batch size among them; a claim
        assert tables == {"claims", "verdicts"}
        assert "Parallel Coordinates Plot" in kinds
        assert section["settings"]["xAxis"] == "tokens"
    else:  # one axis (the variant): no parallel coordinates; no claim
        assert tables == {"verdicts"} and "Parallel Coordinates Plot" not in kinds
        assert section["settings"]["xAxis"] == "trainer/global_step"
        columns = runset["runFeed"]["columnOrder"]
        assert "config:meta.value.variant" in columns


SHIPPED = sorted(p.parent.parent.name for p in ROOT.glob("reports/*/archive/store.tar.gz"))


@pytest.mark.parametrize("study", SHIPPED)
def test_the_shipped_specs_name_only_what_their_runs_log(study, tmp_path):
    """Each shipped ``reports/<study>/wandb_*.json`` against the archived store it was built
    from: its history keys are metrics the runs logged (the test above shows W&B gets the
    store's rows, with the step and the tokens), its summary keys are those a run's W&B
    summary gets, its config paths the runs' configs, its run sets the store's runs."""
    from ablate.store import RunStore
    from ablate.tracking.ids import STEP, TOKENS, report_run_id, wandb_run_id
    from ablate.tracking.runs import HEADLINE

    with tarfile.open(ROOT / "reports" / study / "archive" / "store.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    runs, metrics, summary = [], set(), {"status", "final_val_loss_on"}
    for d in RunStore(tmp_path).runs(study):
        data, stored = d.read_run(), d.read_summary() or {}
        metrics |= {m for _, m, _ in d.read_metrics()}
        summary |= {k for k in HEADLINE if stored.get(k) is not None}
        summary |= {f"val_loss_at_{float(m):g}x" for m in stored.get("val_loss_at_length") or {}}
        run = SimpleNamespace(run_group=study, job_type="train", run_id=wandb_run_id(d))
        runs.append(SimpleNamespace(run=run, config={**data["config"], "meta": data["meta"]}))
    claims = (yaml.safe_load((ROOT / "studies" / f"{study}.yaml").read_text()) or {}).get("claims")
    report_summary = {f"{t}/_type": "table-file" for t in ("results", "verdicts")}
    report_summary |= {"claims/_type": "table-file"} if claims else {}
    for png in (ROOT / "reports" / study).glob("*.png"):
        report_summary[f"figures/{png.stem}/_type"] = "image-file"
    report = SimpleNamespace(
        run=SimpleNamespace(run_group=study, job_type="report", run_id=report_run_id(study)),
        summary=report_summary,
    )
    logged = SimpleNamespace(
        runs=runs, report=report, history=metrics | {STEP, TOKENS}, summary=summary | metrics
    )
    workspace = json.loads((ROOT / "reports" / study / "wandb_workspace.json").read_text())
    section = workspace["spec"]["section"]
    assert section["settings"]["maxRuns"] >= len(runs)
    for s in section["panelBankConfig"]["sections"]:
        for panel in s["panels"]:
            _check_panel(panel, logged)
    _check_runset(section["runSets"][0], logged, study)
    report_spec = json.loads((ROOT / "reports" / study / "wandb_report.json").read_text())
    grids = [b["metadata"] for b in report_spec["spec"]["blocks"] if b["type"] == "panel-grid"]
    assert any(
        p["viewType"] == "Run History Line Plot"
        for g in grids
        for p in g["panelBankSectionConfig"]["panels"]
    )
    for g in grids:
        for runset in g["runSets"]:
            _check_runset(runset, logged, study)
        for panel in g["panelBankSectionConfig"]["panels"]:
            _check_panel(panel, logged)
