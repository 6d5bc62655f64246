"""A study of named variants (``variants:``) reads as the study names them."""

from ablate.config import build_config
from ablate.names import display_names
from ablate.report import build_report
from ablate.results import read_study
from ablate.store import RunStore


def _variant_run(store, variant: str, arch: str, seed: int, final: float) -> None:
    """A finished run of the variants study "arch", as the runner leaves one."""
    cfg = build_config({"model.arch": arch, "train.seed": seed, "tracking.wandb": False})
    run = RunStore(store).run("arch", cfg.run_id())
    meta = {"name": f"{variant},seed={seed}", "variant": variant, "seed": seed}
    run.write_run(cfg.to_dict(), {**meta, "axes": {"variant": variant}, "study": "arch"})
    for step, loss in ((0, 4.0), (50, final + 0.3), (100, final)):
        run.append_metrics(step, {"train/loss": loss, "val/loss": loss})
    summary = {"status": "completed", "seed": seed, "axes": {"variant": variant}, "steps": 100}
    run.write_summary(summary | {"final_val_loss": final, "best_val_loss": final})


def test_a_variants_study_names_its_axis_variants_not_axis_variant(tmp_path):
    """The runs table keeps the axis of the study's ``variants:`` list as ``axis.variant``
    (``variant`` is the label column, a variant's name with the other axes' values); the
    report names it as the study does, ``variants``, with the variants' names."""
    store = tmp_path / "runs"
    for seed in (0, 1, 2):
        _variant_run(store, "transformer", "transformer", seed, 2.0 + 0.01 * seed)
        _variant_run(store, "lstm", "lstm", seed, 2.3 - 0.02 * seed)
    study = read_study(store, "arch")
    assert study.axes == ["axis.variant"]
    assert display_names(["axis.variant", "model.norm_placement", "train.seed"]) == {
        "axis.variant": "variants",
        "model.norm_placement": "norm_placement",
        "train.seed": "train.seed",  # a name the report uses for a column keeps its key
    }
    report = build_report(study, tmp_path / "reports").read_text()
    assert "axis.variant" not in report, report
    assert "axes: `variants` (lstm, transformer)" in report
    assert "| variants | lstm vs transformer | 3 (0) vs 3 (0) | +" in report  # lstm's higher
