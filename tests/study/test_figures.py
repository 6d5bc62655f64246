"""The figures a study declares (``figures:``): typed options checked when the study loads, one
line naming the file and key, exit 2 and nothing written for a bad one."""

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError
from ablate.study import load_study
from ablate.study.figures import Heatmap, LayerGradients, LengthCurves


def test_declared_figures_reach_the_study(make_study):
    figures = {
        "layer_gradients": {"by": "model.norm_placement", "values": ["post", "pre"]},
        "heatmap": {"rows": "data.batch_size", "columns": "optim.lr", "used": "lr"},
        "length_curves": {},
    }
    study = load_study(make_study(figures=figures), check_data=False)
    assert study.figures == {
        "layer_gradients": LayerGradients(by="model.norm_placement", values=("post", "pre")),
        "heatmap": Heatmap(rows="data.batch_size", columns="optim.lr", used="lr"),
        "length_curves": LengthCurves(by=None),
    }
    assert load_study(make_study(name="plain"), check_data=False).figures == {}


@pytest.mark.parametrize(
    ("figures", "key", "needle"),
    [
        ({"heatmapp": {}}, "figures.heatmapp", "unknown figure (did you mean 'heatmap'?)"),
        ({"heatmap": {"rows": "data.batch_size"}}, "figures.heatmap.columns", "Field required"),
        (
            {"heatmap": {"rows": "data.batch_sise", "columns": "optim.lr"}},
            "figures.heatmap.rows",
            "did you mean 'data.batch_size'",
        ),
        (
            {"length_curves": {"by": "model.pos_encoding", "x": 1}},
            "figures.length_curves.x",
            "Extra",
        ),
        ({"layer_gradients": "model.norm_placement"}, "figures.layer_gradients", "mapping"),
        (["heatmap"], "figures", "mapping"),
    ],
)
def test_a_bad_figure_is_one_line_naming_the_file_and_key(make_study, figures, key, needle):
    path = make_study(figures=figures)
    with pytest.raises(ConfigError) as err:
        load_study(path, check_data=False)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: {key}: ") and needle in line


def test_ablate_run_refuses_a_bad_figure_before_writing_anything(make_study, tmp_path):
    path = make_study(figures={"heatmap": {"rows": "data.batch_size", "columns": "optim.lrr"}})
    store = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store), "--no-progress"])
    assert result.exit_code == 2 and "figures.heatmap.columns" in result.output
    assert not store.exists()


def test_ablate_report_refuses_a_bad_figure_in_one_line(make_study, tmp_path, write_run):
    store = tmp_path / "runs"
    write_run(store, "tiny", {"model.norm_placement": "pre"}, 0, "completed", 1.5)
    path = make_study(figures={"layer_gradients": {"by": "model.norm_placment"}})
    args = ["report", str(path), "--store", str(store), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "figures.layer_gradients.by" in result.output
    assert "did you mean 'model.norm_placement'" in result.output
    assert not (tmp_path / "out").exists()
