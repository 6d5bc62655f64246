from pathlib import Path

import pytest

from ablate.accel import compile_problem
from ablate.config import (
    ConfigError,
    RunConfig,
    build_config,
    check_key,
    flatten,
    load_run_config,
    load_yaml,
    parse_override,
)


def test_defaults_and_derived_properties():
    cfg = RunConfig()
    assert cfg.model.ff_dim == 4 * cfg.model.d_model
    assert cfg.model.head_dim == cfg.model.d_model // cfg.model.n_heads
    assert cfg.model.kv_heads == cfg.model.n_heads
    glu = build_config({"model.activation": "swiglu", "model.d_ff": 300})
    assert glu.model.ffn_hidden == 200
    unmatched = build_config(
        {"model.activation": "swiglu", "model.d_ff": 300, "model.glu_param_match": False}
    )
    assert unmatched.model.ffn_hidden == 300


def test_lr_scaling_rules():
    base = {"optim.lr": 1e-3, "optim.ref_batch_size": 16, "data.batch_size": 64}
    assert build_config({**base, "optim.lr_scaling": "linear"}).lr == pytest.approx(4e-3)
    assert build_config({**base, "optim.lr_scaling": "sqrt"}).lr == pytest.approx(2e-3)
    assert build_config({**base, "optim.lr_scaling": "none"}).lr == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "override, key, fragment",
    [
        ("model.norm_placment=pre", "model.norm_placment", "did you mean 'model.norm_placement'"),
        ("modle.d_model=8", "modle.d_model", "did you mean 'model'"),
        ("model.norm=batchnorm", "model.norm", "'layernorm' or 'rmsnorm'"),
        ("model.pos_encoding=xpos", "model.pos_encoding", "'rope'"),
        ("optim.lr=0", "optim.lr", "greater than 0"),
        ("model.dropout=1.0", "model.dropout", "less than 1"),
        ("train.max_steps=-5", "train.max_steps", "greater than or equal to 1"),
        ("model.d_model=130", "model", "divisible by n_heads"),
        ("model.d_model=abc", "model.d_model", "integer"),
    ],
)
def test_bad_values_name_the_key(override, key, fragment):
    with pytest.raises(ConfigError) as exc:
        load_run_config(None, [override])
    msg = str(exc.value)
    assert key in msg and fragment in msg
    assert "\n" not in msg


def test_yaml_file_errors_name_the_file(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("model:\n  d_model: 64\n  n_head: 4\n")
    with pytest.raises(ConfigError, match=r"run.yaml: model.n_head: unknown key"):
        load_run_config(p)
    p.write_text("model: [1, 2\n")
    with pytest.raises(ConfigError, match=r"run.yaml: line \d+: invalid YAML"):
        load_run_config(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_run_config(tmp_path / "missing.yaml")


def test_a_study_name_given_for_its_file_points_at_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "mine.yaml").write_text("name: mine\n")
    with pytest.raises(
        ConfigError, match=r"file not found \(the study's file is studies/mine.yaml\)"
    ):
        load_yaml("mine")
    with pytest.raises(ConfigError, match=r"other: file not found$"):
        load_yaml("other")


def test_flatten_takes_sections_and_dotted_keys_and_names_the_key_path():
    tree = {"model": {"d_model": 8}, "optim.lr": 1e-3, "derived": {"x": 1}}
    assert flatten(tree, extra=("derived",)) == {
        "model.d_model": 8,
        "optim.lr": 1e-3,
        "derived": {"x": 1},
    }
    assert flatten(None) == {}
    assert flatten(RunConfig().to_dict())["model.d_model"] == 128
    with pytest.raises(ConfigError, match=r"^base\.modle: unknown section 'modle' \(did you mean"):
        flatten({"modle": {}}, where="base")
    with pytest.raises(ConfigError, match=r"^x\.yaml: grid\.model\.n_head: unknown key \(did"):
        flatten({"model": {"n_head": [4]}}, "x.yaml", where="grid")
    with pytest.raises(ConfigError, match=r"^base: must be a mapping of config keys, got list"):
        flatten([1], where="base")


def test_check_key_says_what_is_wrong():
    assert check_key("model.d_model") == "model.d_model"
    with pytest.raises(ConfigError, match=r"^grid.d_model: expected a dotted config key"):
        check_key("d_model", "grid.d_model")
    with pytest.raises(ConfigError, match=r"^modle.n_heads: unknown section 'modle' \(did you"):
        check_key("modle.n_heads")


def test_overrides_parse_as_yaml_and_win_over_file(tmp_path):
    assert parse_override("optim.lr=3e-4") == ("optim.lr", 3e-4)
    assert parse_override("train.eval_lengths=[1, 2]") == ("train.eval_lengths", [1, 2])
    p = tmp_path / "run.yaml"
    p.write_text("model:\n  d_model: 64\n  n_heads: 4\n")
    cfg = load_run_config(p, ["model.d_model=32"])
    assert cfg.model.d_model == 32 and cfg.model.n_heads == 4


def test_run_id_is_stable_and_ignores_tracking():
    a = build_config({"model.d_model": 64})
    b = build_config({"model.d_model": 64, "tracking.wandb": False, "train.progress": False})
    c = build_config({"model.d_model": 64, "train.seed": 1})
    assert a.run_id() == b.run_id()
    assert a.run_id() != c.run_id()
    assert len(a.run_id()) == 12


ARCHIVES = sorted(
    p.parents[1].name
    for p in (Path(__file__).parents[2] / "reports").glob("*/archive/store.tar.gz")
)
# how a run trains: none of these may move a run id
WAYS_OF_TRAINING = (
    {"compile": True},
    {"compile": True, "compile_mode": "reduce-overhead"},
    {"stack": "8"},
    {"stack": "auto", "compile": True},
)


def _archived_runs(study: str) -> list[dict]:
    import tarfile

    import yaml

    archive = Path(__file__).parents[2] / "reports" / study / "archive" / "store.tar.gz"
    with tarfile.open(archive) as tar:
        return [
            yaml.safe_load(tar.extractfile(m).read())
            for m in tar.getmembers()
            if m.name.endswith("/run.yaml")
        ]


@pytest.mark.parametrize("study", ARCHIVES)
def test_archived_runs_keep_their_ids(study):
    """The shipped stores (what their reports prove things about) name every run by the id of
    its config: a new config value (``data.order: random``) moves none, and neither does a way
    of training (compiled, CUDA graphs, stacked): the id a run had eager and alone."""
    runs = _archived_runs(study)
    assert len(runs) >= 10
    for run in runs:
        cfg = RunConfig.model_validate(run["config"])
        assert cfg.run_id() == run["meta"]["run_id"]
        for way in WAYS_OF_TRAINING:
            train = cfg.train.model_copy(update=way)
            assert cfg.model_copy(update={"train": train}).run_id() == run["meta"]["run_id"]
    random = build_config({"data.order": "random"})
    assert random.run_id() != build_config({}).run_id()


def test_every_shipped_store_is_checked():
    assert len(ARCHIVES) >= 7 and {"reference_nanogpt_cpu", "batch_lr_scaling"} <= set(ARCHIVES)


@pytest.mark.skipif(compile_problem() is not None, reason="train.compile needs a C++ compiler")
def test_plan_gives_the_same_run_ids_compiled_or_not(make_study, tmp_path):
    """``ablate plan`` names the runs ``--set train.compile=true`` would train by the ids they
    have eager (a verdict of the GPU probe may compile a registered study's runs)."""
    import re

    from typer.testing import CliRunner

    from ablate.cli import app

    path = make_study()
    ids = []
    for extra in ([], ["--set", "train.compile=true"], ["--set", "train.stack=2"]):
        args = ["plan", str(path), "--no-estimate", "--store", str(tmp_path / "runs"), *extra]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        ids.append(re.findall(r"\b[0-9a-f]{12}\b", res.output))
    assert len(ids[0]) == 2 and ids[0] == ids[1] == ids[2]
    cfg = build_config({})
    eager = cfg.run_id()
    assert build_config({"train.compile": True}).run_id() == eager
    assert build_config({"train.seed": 1}).run_id() != eager  # what a run is still moves it


def test_learned_positions_must_cover_the_context():
    with pytest.raises(ConfigError, match="seq_len"):
        build_config({"data.seq_len": 512, "model.max_seq_len": 256})
    build_config({"data.seq_len": 512, "model.max_seq_len": 256, "model.pos_encoding": "rope"})
