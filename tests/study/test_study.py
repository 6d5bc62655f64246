"""Study files: expansion, precedence, naming, stable ids and one-line validation errors."""

import functools
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError, build_config
from ablate.study import load_study, planned_run_id
from ablate.study import load_study as _load_study

STUDIES = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 500)
    return path


@pytest.fixture
def write(tmp_path, corpus):
    """Write a study dict (with a small local dataset in base unless given) to x.yaml."""

    def _write(study: dict, name: str = "x.yaml") -> Path:
        study = dict(study)
        base = dict(study.get("base") or {})
        base.setdefault("data.dataset", str(corpus))
        study["base"] = base
        path = tmp_path / name
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        return path

    return _write


def test_grid_is_the_cartesian_product_times_seeds(write):
    path = write(
        {
            "grid": {"model.norm_placement": ["post", "pre"], "optim.warmup_ratio": [0.0, 0.1]},
            "seeds": [0, 1, 2],
        }
    )
    study = load_study(path)
    assert study.name == "x"  # default: the file stem
    assert len(study.runs) == 2 * 2 * 3
    first = study.runs[0]
    assert first.name == "norm_placement=post,warmup_ratio=0.0,seed=0"
    assert first.variant == "norm_placement=post,warmup_ratio=0.0"
    assert first.axes == {"model.norm_placement": "post", "optim.warmup_ratio": 0.0}
    assert first.seed == 0 and first.config.train.seed == 0
    names = [r.name for r in study.runs]
    assert len(set(names)) == len(names)
    # every combination appears once per seed
    combos = {(r.config.model.norm_placement, r.config.optim.warmup_ratio) for r in study.runs}
    assert combos == {("post", 0.0), ("post", 0.1), ("pre", 0.0), ("pre", 0.1)}
    assert sorted(r.seed for r in study.runs if r.variant == first.variant) == [0, 1, 2]
    meta = study.meta(first)
    assert meta == {
        "name": first.name,
        "variant": first.variant,
        "axes": first.axes,
        "seed": 0,
        "study": "x",
        "profile": None,
    }


def test_precedence_defaults_base_profile_variant_grid_seed_set(write):
    path = write(
        {
            "base": {
                "model": {"n_layers": 2, "d_model": 64},
                "optim.lr": 1e-3,
                "train": {"seed": 7, "max_steps": 11},
            },
            "profiles": {
                "cpu": {"model.n_layers": 3, "optim.lr": 2e-3, "train.eval_interval": 5},
                "gpu": {"model.n_layers": 8},
            },
            "variants": [
                {"name": "a", "set": {"optim.lr": 3e-3, "model.d_model": 32}},
                {"name": "b", "set": {}},
            ],
            "grid": {"model.d_model": [16, 48]},
            "seeds": [1],
        }
    )
    study = load_study(path, profile="cpu")
    by = {r.name: r.config for r in study.runs}
    assert set(by) == {
        "a,d_model=16,seed=1",
        "a,d_model=48,seed=1",
        "b,d_model=16,seed=1",
        "b,d_model=48,seed=1",
    }
    a16 = by["a,d_model=16,seed=1"]
    assert a16.model.n_heads == 4  # default
    assert a16.train.max_steps == 11  # base
    assert a16.model.n_layers == 3 and a16.train.eval_interval == 5  # profile over base
    assert a16.optim.lr == 3e-3  # variant over profile
    assert by["b,d_model=16,seed=1"].optim.lr == 2e-3  # no variant value: profile's
    assert a16.model.d_model == 16  # grid over variant
    assert a16.train.seed == 1  # seeds over base
    # --set wins over everything; setting an axis collapses it: two points, one config
    with pytest.raises(ConfigError, match="resolve to the same config"):
        load_study(path, "cpu", ["model.d_model=24"])
    study = load_study(path, "cpu", ["model.n_layers=5", "train.max_steps=3"])
    assert {r.config.model.n_layers for r in study.runs} == {5}
    assert {r.config.train.max_steps for r in study.runs} == {3}
    assert {r.config.model.d_model for r in study.runs} == {16, 48}


def test_axis_values_are_validated_values(write):
    runs = load_study(write({"grid": {"optim.warmup_ratio": [0, 0.1]}})).runs
    assert [r.name for r in runs] == ["warmup_ratio=0.0,seed=0", "warmup_ratio=0.1,seed=0"]
    assert runs[0].axes == {"optim.warmup_ratio": 0.0}


def test_variants_combine_with_the_grid(write):
    path = write(
        {
            "variants": [
                {"name": "transformer"},
                {"name": "lstm", "set": {"model": {"arch": "lstm", "d_model": 96}}},
            ],
            "grid": {"optim.lr": [1e-3, 3e-3]},
            "seeds": [0, 1],
        }
    )
    runs = load_study(path).runs
    assert len(runs) == 2 * 2 * 2
    lstm = [r for r in runs if r.axes["variant"] == "lstm"]
    assert len(lstm) == 4
    assert all(r.config.model.arch == "lstm" and r.config.model.d_model == 96 for r in lstm)
    assert lstm[0].name == "lstm,lr=0.001,seed=0"
    assert lstm[0].variant == "lstm,lr=0.001"
    assert lstm[0].axes == {"variant": "lstm", "optim.lr": 0.001}


def test_only_variants_and_no_seeds(write):
    path = write(
        {
            "variants": [
                {"name": "pre", "set": {"model.norm_placement": "pre"}},
                {"name": "post", "set": {"model.norm_placement": "post"}},
            ]
        }
    )
    runs = load_study(path).runs
    assert [r.name for r in runs] == ["pre,seed=0", "post,seed=0"]
    assert [r.variant for r in runs] == ["pre", "post"]


def test_no_axes_at_all_is_one_run_per_seed(write):
    runs = load_study(write({"seeds": [3, 4]})).runs
    assert [r.name for r in runs] == ["seed=3", "seed=4"]
    assert runs[0].variant == "base" and runs[0].axes == {}


def test_run_ids_are_stable_and_seed_sensitive(write):
    path = write({"grid": {"model.activation": ["relu", "gelu"]}, "seeds": [0, 1]})
    a = load_study(path)
    b = load_study(path)
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]
    assert len({r.run_id for r in a.runs}) == 4  # different seed or activation: different id
    run = a.runs[0]
    assert run.run_id == planned_run_id(run.config)
    # the same config reached another way (plain build_config) has the same id
    same = build_config(
        {"data.dataset": run.config.data.dataset, "model.activation": "relu", "train.seed": 0}
    )
    assert planned_run_id(same) == run.run_id
    # display-only options do not change the id
    c = load_study(path, overrides=["train.progress=false", "tracking.wandb=false"])
    assert [r.run_id for r in c.runs] == [r.run_id for r in a.runs]


def test_profiles_default_and_selection(write):
    path = write(
        {
            "profiles": {"cpu": {"train.max_steps": 10}, "gpu": {"train.max_steps": 1000}},
            "default_profile": "cpu",
        }
    )
    assert load_study(path).profile == "cpu"
    assert load_study(path).runs[0].config.train.max_steps == 10
    gpu = load_study(path, profile="gpu")
    assert gpu.profile == "gpu" and gpu.runs[0].config.train.max_steps == 1000
    assert gpu.profiles == ("cpu", "gpu")
    with pytest.raises(ConfigError) as err:
        load_study(path, profile="tpu")
    assert "unknown profile 'tpu'" in str(err.value) and "valid: cpu, gpu" in str(err.value)
    # without default_profile and without --profile: base only
    path = write({"profiles": {"cpu": {"train.max_steps": 10}}}, "nodefault.yaml")
    study = load_study(path)
    assert study.profile is None and study.runs[0].config.train.max_steps == 200


def test_default_profile_auto_takes_the_gpu_profile_where_cuda_is_visible(write, monkeypatch):
    import ablate.study.load

    path = write(
        {
            "profiles": {
                "cpu": {"train.max_steps": 10, "train.accelerator": "cpu"},
                "gpu": {"train.max_steps": 1000, "train.accelerator": "gpu"},
            },
            "default_profile": "auto",
        }
    )
    cpu = load_study(path)
    assert cpu.profile == "cpu"
    assert cpu.profile_reason == "default_profile auto: no CUDA device visible"
    monkeypatch.setattr(ablate.study.load, "gpu_available", lambda: True)
    gpu = load_study(path, check_device=False)
    assert gpu.profile == "gpu" and "a CUDA device is visible" in gpu.profile_reason
    assert load_study(path, "cpu").profile_reason == "--profile"


def test_every_shipped_study_picks_its_profile_by_the_device(monkeypatch):
    import ablate.study.load

    for path in STUDIES:
        assert load_study(path, check_data=False).profile == "cpu", path
    monkeypatch.setattr(ablate.study.load, "gpu_available", lambda: True)
    for path in STUDIES:
        assert load_study(path, check_data=False, check_device=False).profile == "gpu", path


def test_run_prints_the_profile_it_chose_and_a_gpu_profile_here_is_one_line(write, tmp_path):
    path = write(
        {
            "base": {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2}
            | {"model.max_seq_len": 16, "data.seq_len": 16, "data.batch_size": 2}
            | {"train.threads": 1, "train.eval_interval": 2, "tracking.wandb": False},
            "profiles": {
                "cpu": {"train.max_steps": 2, "train.accelerator": "cpu"},
                "gpu": {"train.max_steps": 1000, "train.accelerator": "gpu"},
            },
            "default_profile": "auto",
        }
    )
    store = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(store), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "profile cpu: default_profile auto: no CUDA device visible" in res.output
    gpu_store = tmp_path / "gpu-runs"
    res = CliRunner().invoke(app, ["run", str(path), "-p", "gpu", "--store", str(gpu_store)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "profiles.gpu.train.accelerator" in res.output and "ablate run smoke" in res.output
    assert not gpu_store.exists()


def test_profiles_can_set_seeds_and_per_variant_values(write):
    path = write(
        {
            "variants": [
                {"name": "transformer", "set": {"model.arch": "transformer"}},
                {"name": "lstm", "set": {"model.arch": "lstm", "model.n_layers": 1}},
            ],
            "grid": {"model.d_model": [32, 64]},
            "seeds": [0, 1, 2],
            "profiles": {
                "cpu": {"seeds": [5], "variants": {"lstm": {"model.n_layers": 2}}},
                "gpu": {"model.n_layers": 6},
            },
        }
    )
    cpu = load_study(path, profile="cpu").runs
    assert len(cpu) == 2 * 2 and {r.seed for r in cpu} == {5}
    by = {r.name: r.config for r in cpu}
    assert by["lstm,d_model=32,seed=5"].model.n_layers == 2  # the profile's value for lstm
    assert by["transformer,d_model=32,seed=5"].model.n_layers == 4  # default
    assert by["lstm,d_model=64,seed=5"].model.d_model == 64  # the grid still wins
    gpu = load_study(path, profile="gpu").runs
    assert len(gpu) == 2 * 2 * 3
    assert {r.config.model.n_layers for r in gpu if r.config.model.arch == "lstm"} == {1}


def test_a_profile_states_its_tier_and_its_reference(write):
    path = write(
        {
            "reference": {"value": 1.88, "label": "cpu paper"},
            "profiles": {
                "cpu": {},
                "gpu": {"tier": 2, "reference": {"value": 1.47, "label": "gpu paper"}},
                "tpu": {"reference": None},
            },
        }
    )
    cpu, gpu, tpu = (load_study(path, profile=p) for p in ("cpu", "gpu", "tpu"))
    assert (cpu.tier, gpu.tier, tpu.tier) == (None, 2, None)
    assert cpu.reference.value == 1.88 and gpu.reference.label == "gpu paper"
    assert tpu.reference is None  # a profile may drop a value that belongs to another scale


def test_a_profile_gives_its_own_description_and_findings_to_its_reports(write):
    from ablate.results.read import scale_texts

    study = {
        "description": "At CPU scale.",
        "findings": "The cpu runs.",
        "profiles": {"cpu": {}, "gpu": {"findings": "The gpu runs."}},
    }
    path = write(study)
    assert load_study(path, profile="gpu").runs  # a valid profile key
    raw = yaml.safe_load(path.read_text())
    gpu, cpu = scale_texts(raw, "gpu"), scale_texts(raw, "cpu")
    assert (gpu["findings"], gpu["description"]) == ("The gpu runs.", "At CPU scale.")
    assert (cpu["findings"], scale_texts(raw, None)["findings"]) == ("The cpu runs.",) * 2
    study["profiles"]["gpu"]["findings"] = ["not", "text"]
    with pytest.raises(ConfigError, match=r"profiles\.gpu\.findings: must be a string"):
        load_study(write(study), profile="gpu")


def test_derived_values_follow_each_run(write):
    path = write(
        {
            "base": {"data": {"seq_len": 16}, "optim.ref_batch_size": 8},
            "grid": {"data.batch_size": [4, 8, 16], "optim.lr_scaling": ["none", "sqrt"]},
            "derived": {
                "train.max_steps": "6400 // (data.batch_size * data.seq_len)",
                "train.eval_interval": "max(1, train.max_steps // 4)",
            },
            "profiles": {
                "cpu": {},
                "gpu": {"derived": {"train.max_steps": "12800 // (data.batch_size * 16)"}},
            },
        }
    )
    runs = load_study(path).runs
    steps = {r.config.data.batch_size: r.config.train.max_steps for r in runs}
    assert steps == {4: 100, 8: 50, 16: 25}
    assert all(r.config.train.eval_interval == r.config.train.max_steps // 4 for r in runs)
    sqrt16 = next(r for r in runs if r.name == "batch_size=16,lr_scaling=sqrt,seed=0")
    assert sqrt16.config.lr == pytest.approx(1e-3 * 2**0.5)
    gpu = load_study(path, profile="gpu").runs
    assert {r.config.data.batch_size: r.config.train.max_steps for r in gpu}[4] == 200
    # --set wins over a derived value
    fixed = load_study(path, overrides=["train.max_steps=7"]).runs
    assert {r.config.train.max_steps for r in fixed} == {7}


# --- validation: one line, naming the file and the key path ------------------------------------

BAD = [
    ({"grdi": {}}, "grdi", "unknown top-level key (did you mean 'grid'?)"),
    (
        {"grid": {"model.norm_placment": ["post", "pre"]}},
        "grid.model.norm_placment",
        "unknown key (did you mean 'model.norm_placement'?)",
    ),
    ({"base": {"modle": {"d_model": 8}}}, "base.modle", "unknown section 'modle'"),
    ({"base": {"model": {"d_modle": 8}}}, "base.model.d_modle", "did you mean 'model.d_model'"),
    ({"base": {"model.d_model": "big"}}, "base.model.d_model", "valid integer"),
    ({"base": {"train.max_steps": -5}}, "base.train.max_steps", "greater than or equal to 1"),
    (
        {"variants": [{"name": "a"}, {"name": "b", "set": {"optim.lr": 0}}]},
        "variants[1].set.optim.lr",
        "greater than 0",
    ),
    ({"grid": {"model.dropout": [0.0, 1.0]}}, "grid.model.dropout[1]", "less than 1"),
    ({"grid": {"model.dropout": [0.1, -0.1]}}, "grid.model.dropout[1]", "greater than or equal"),
    (
        {"grid": {"model.activation": ["relu", "swish"]}},
        "grid.model.activation[1]",
        "'relu', 'gelu', 'swiglu' or 'geglu'",
    ),
    ({"base": {"data.dataset": "no/such/file.txt"}}, "base.data.dataset", "unknown dataset"),
    ({"grid": {"model.n_layers": []}}, "grid.model.n_layers", "empty axis"),
    ({"grid": {"model.n_layers": 2}}, "grid.model.n_layers", "must be a list"),
    ({"grid": {"model.n_layers": [2, 2]}}, "grid.model.n_layers[1]", "duplicate value"),
    (
        {"variants": [{"name": "a"}, {"name": "a", "set": {"model.n_layers": 3}}]},
        "variants[1].name",
        "duplicate variant name 'a'",
    ),
    (
        {"variants": [{"name": "a"}, {"name": "b", "set": {"model.n_layers": 4}}]},
        "variants",
        "runs 'a,seed=0' and 'b,seed=0' resolve to the same config",
    ),
    (
        {"variants": [{"name": "a"}, {"name": "b", "set": {"model.d_model": 30}}]},
        "variants[1].set.model.d_model",
        "d_model (30) must be divisible by n_heads (4)",
    ),
    (
        {"base": {"model.n_heads": 3}, "grid": {"model.d_model": [12, 16]}},
        "grid.model.d_model",
        "must be divisible by n_heads (3)",
    ),
    ({"variants": [{"name": "a", "sets": {}}]}, "variants[0].sets", "did you mean 'set'"),
    ({"variants": [{"set": {}}]}, "variants[0].name", "non-empty string name"),
    ({"variants": []}, "variants", "empty list"),
    ({"seeds": [0, "one"]}, "seeds[1]", "must be an integer"),
    ({"seeds": [0, 0]}, "seeds[1]", "duplicate seed"),
    ({"seeds": []}, "seeds", "non-empty list"),
    (
        {"seeds": [0], "grid": {"train.seed": [1, 2]}},
        "grid.train.seed",
        "top-level 'seeds'",
    ),
    ({"profiles": {"cpu": {"train.max_step": 3}}}, "profiles.cpu.train.max_step", "unknown key"),
    ({"profiles": {"cpu": {}}, "default_profile": "gpu"}, "default_profile", "valid: cpu"),
    (
        {"derived": {"train.max_steps": "data.batch_sise * 2"}},
        "derived.train.max_steps",
        "did you mean 'data.batch_size'",
    ),
    (
        {"derived": {"train.max_steps": "__import__('os')"}},
        "derived.train.max_steps",
        "unknown function",
    ),
    (
        {"derived": {"train.max_steps": "1000 // (data.batch_size"}},
        "derived.train.max_steps",
        "invalid expression",
    ),
    (
        {"derived": {"train.max_steps": "0 * data.batch_size"}},
        "derived.train.max_steps",
        "greater than or equal to 1",
    ),
    (
        {"derived": {"train.max_steps": "100"}, "grid": {"train.max_steps": [1, 2]}},
        "derived.train.max_steps",
        "cannot also be set in grid",
    ),
    ({"name": "a/b"}, "name", "names a folder"),
    (
        {"variants": [{"name": "a"}], "profiles": {"cpu": {"variants": {"b": {}}}}},
        "profiles.cpu.variants.b",
        "no variant named 'b'",
    ),
    ({"profiles": {"cpu": {"seeds": [1, 1]}}}, "profiles.cpu.seeds[1]", "duplicate seed"),
    (
        {"base": {"data.seq_len": 300, "model.max_seq_len": 256}},
        "base.data.seq_len",
        "exceeds model.max_seq_len",
    ),
    ({"reference": 1.88}, "reference", "must be a mapping"),
    ({"reference": {"value": "low"}}, "reference.value", "must be a finite number"),
    ({"reference": {"label": "x"}}, "reference.value", "must be a finite number"),
    ({"reference": {"value": 1.88, "lable": "x"}}, "reference.lable", "did you mean 'label'"),
    ({"reference": {"value": 1.88, "label": ""}}, "reference.label", "non-empty string"),
    ({"profiles": {"gpu": {"tier": 0}}}, "profiles.gpu.tier", "whole number >= 1"),
    ({"profiles": {"gpu": {"tier": "one"}}}, "profiles.gpu.tier", "whole number >= 1"),
    ({"profiles": {"gpu": {"tier": True}}}, "profiles.gpu.tier", "whole number >= 1"),
    (
        {"profiles": {"gpu": {"reference": {"value": "x"}}}},
        "profiles.gpu.reference.value",
        "must be a finite number",
    ),
    ({"profiles": {"gpu": {"claims": [1]}}}, "profiles.gpu.claims", "mapping of claim id"),
]


@pytest.mark.parametrize(("study", "key", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_study_is_one_line_naming_file_and_key(write, study, key, message):
    path = write(study)
    with pytest.raises(ConfigError) as err:
        load_study(path)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: {key}: "), text
    assert message in text, text


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_study(bad)
    with pytest.raises(ConfigError, match="file not found"):
        load_study(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty study file"):
        load_study(empty)


def test_bad_set_override(write):
    path = write({})
    with pytest.raises(ConfigError, match=r"^--set: model.d_modl: unknown key \(did you mean"):
        load_study(path, overrides=["model.d_modl=3"])
    with pytest.raises(ConfigError, match=r"^--set: train.max_steps: .*greater than or equal"):
        load_study(path, overrides=["train.max_steps=0"])
    with pytest.raises(ConfigError, match=r"--set model.d_model: d_model \(30\) must be divisible"):
        load_study(path, overrides=["model.d_model=30"])


def test_registered_dataset_is_fine_at_plan_time(write, monkeypatch, tmp_path):
    # a registered name validates without being downloaded or even present
    monkeypatch.setenv("ABLATE_DATA_DIR", str(tmp_path / "nothing-here"))
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "no-cache"))
    study = load_study(write({"base": {"data.dataset": "tinyshakespeare"}}))
    assert study.runs[0].config.data.dataset == "tinyshakespeare"
    assert not (tmp_path / "no-cache").exists()


# --- the shipped studies -----------------------------------------------------------------------


def test_studies_are_shipped():
    names = {p.stem for p in STUDIES}
    assert {
        "norm_placement",
        "positional_encoding",
        "activation",
        "architecture",
        "batch_lr_scaling",
        "reference_nanogpt_cpu",
    } <= names


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_validates_for_every_profile(path):
    # the gpu profiles ask for a GPU, which the plan-time check requires only where one trains
    load_study = functools.partial(_load_study, check_device=False)
    study = load_study(path)
    assert study.name == path.stem
    assert len(study.description) > 100  # the question and the paper
    assert {"cpu", "gpu"} <= set(study.profiles)
    for profile in study.profiles:
        s = load_study(path, profile=profile)
        assert s.runs and len({r.run_id for r in s.runs}) == len(s.runs)
        for r in s.runs:
            t = r.config.train
            if profile == "cpu":
                assert t.accelerator == "cpu" and t.precision == "32-true"
            if profile == "gpu":
                assert t.accelerator == "gpu" and t.precision == "bf16-mixed"
                # flash cannot take ALiBi's additive bias: that study uses one other kernel
                assert t.attn_backend == ("efficient" if "pos" in path.stem else "flash")


def test_norm_placement_study_matches_the_paper_setup():
    runs = load_study(STUDIES[0].parent / "norm_placement.yaml", profile="cpu").runs
    assert len(runs) == 2 * 2 * 3
    assert {r.config.model.norm_placement for r in runs} == {"post", "pre"}
    assert {r.config.optim.warmup_ratio > 0 for r in runs} == {True, False}
    for r in runs:
        assert r.config.model.n_layers >= 6 and r.config.lr >= 1e-3
        assert r.config.train.grad_norm_interval > 0


def test_positional_study_evaluates_longer_contexts():
    runs = load_study(STUDIES[0].parent / "positional_encoding.yaml", profile="cpu").runs
    assert {r.config.model.pos_encoding for r in runs} == {
        "sinusoidal",
        "learned",
        "rope",
        "alibi",
        "none",
    }
    for r in runs:
        assert r.config.train.eval_lengths == [1, 2, 4]
        assert r.config.model.max_seq_len == r.config.data.seq_len


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_architecture_study_matches_parameters(profile):
    torch = pytest.importorskip("torch")
    from ablate.model import build_model

    runs = load_study(
        STUDIES[0].parent / "architecture.yaml", profile=profile, check_device=False
    ).runs
    counts = {}
    for r in runs:
        with torch.device("meta"):
            model = build_model(r.config.model, 65)
        counts[r.config.model.arch] = model.param_counts()["non_embedding"]
    assert set(counts) == {"transformer", "lstm"}
    assert abs(counts["lstm"] / counts["transformer"] - 1) < 0.1, counts
    same = {
        (r.config.data.seq_len, r.config.data.batch_size, r.config.train.max_steps, r.config.lr)
        for r in runs
    }
    assert len(same) == 1  # everything but the model is shared


def test_batch_lr_study_keeps_the_token_budget():
    runs = load_study(STUDIES[0].parent / "batch_lr_scaling.yaml", profile="cpu").runs
    assert {r.config.optim.lr_scaling for r in runs} == {"sqrt"}
    budgets = {r.config.train.max_steps * r.config.data.batch_size for r in runs}
    assert len(budgets) == 1
    # every batch size sweeps the same log-spaced grid of base LRs, scaled by sqrt(batch / 16)
    by_batch: dict[int, list[float]] = {}
    for r in runs:
        k = r.config.data.batch_size / r.config.optim.ref_batch_size
        assert r.config.lr == pytest.approx(r.config.optim.lr * k**0.5)
        by_batch.setdefault(r.config.data.batch_size, []).append(r.config.optim.lr)
    for lrs in by_batch.values():
        grid = sorted(set(lrs))
        assert len(grid) >= 5 and grid[-1] / grid[0] >= 16  # wide enough to bracket the optimum


def test_reference_study_is_nanogpt_cpu():
    study = load_study(STUDIES[0].parent / "reference_nanogpt_cpu.yaml", profile="cpu")
    assert study.reference is not None and study.reference.value == 1.88
    assert [r.seed for r in study.runs] == list(range(8))  # seeds, not one lucky run
    run = study.runs[0]
    m, d, o, t = run.config.model, run.config.data, run.config.optim, run.config.train
    assert (m.n_layers, m.n_heads, m.d_model, d.seq_len, d.batch_size) == (4, 4, 128, 64, 12)
    assert (m.norm_placement, m.activation, m.pos_encoding, m.dropout) == (
        "pre",
        "gelu",
        "learned",
        0.0,
    )
    assert (t.max_steps, o.lr, o.min_lr, o.beta2, o.decay) == (2000, 1e-3, 1e-4, 0.99, "cosine_min")
    assert o.warmup_ratio * t.max_steps == pytest.approx(100)
    assert (d.val_fraction, d.test_fraction, t.final_eval_batches) == (0.1, 0.0, None)


def test_reference_study_at_the_gpu_profile_is_nanogpts_gpu_config():
    """config/train_shakespeare_char.py: 6L/6H/384d, context 256, batch 64, dropout 0.2, 5000
    iterations, lr 1e-3 cosine to 1e-4 after 100 warmup, beta2 0.99, evaluated every 250
    iterations on 200 batches; fewer seeds than the cpu profile (its tier's budget), never
    another shape. Its published number belongs to its claim, not to the cpu reference."""
    path = STUDIES[0].parent / "reference_nanogpt_cpu.yaml"
    study = load_study(path, profile="gpu", check_device=False)
    assert study.reference is None and study.tier == 1
    assert [r.seed for r in study.runs] == [0, 1, 2]
    run = study.runs[0]
    m, d, o, t = run.config.model, run.config.data, run.config.optim, run.config.train
    assert (m.n_layers, m.n_heads, m.d_model, m.dropout) == (6, 6, 384, 0.2)
    assert (d.seq_len, d.batch_size, t.max_steps, t.eval_interval, t.eval_batches) == (
        256,
        64,
        5000,
        250,
        200,
    )
    assert (o.lr, o.min_lr, o.beta2, o.warmup_ratio * t.max_steps) == (1e-3, 1e-4, 0.99, 100)


# --- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "plan"])
def test_cli_bad_study_exits_2_and_writes_nothing(write, tmp_path, command):
    path = write({"grid": {"model.norm_placment": ["post", "pre"]}})
    store = tmp_path / "store"
    result = CliRunner().invoke(app, [command, str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"{path}: grid.model.norm_placment: unknown key" in lines[0]
    assert not store.exists()


def test_cli_unknown_profile_exits_2(write, tmp_path):
    path = write({"profiles": {"cpu": {}, "gpu": {}}})
    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["run", str(path), "-p", "tpu", "--store", str(store)])
    assert result.exit_code == 2
    assert "unknown profile 'tpu'" in result.output and "valid: cpu, gpu" in result.output
    assert not store.exists()


def test_a_run_on_several_devices_is_a_plan_time_error(write, tmp_path):
    path = write({"base": {"train": {"devices": 2}}})
    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store)])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert f"{path}: base.train.devices: is 2, but a run trains on one device" in line, line
    assert not store.exists()


def test_cli_bad_set_exits_2(write, tmp_path):
    path = write({})
    store = tmp_path / "store"
    result = CliRunner().invoke(
        app, ["run", str(path), "--set", "optim.lr=-1", "--store", str(store)]
    )
    assert result.exit_code == 2
    assert "--set: optim.lr:" in result.output
    assert not store.exists()
