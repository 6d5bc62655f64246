"""Plugin components: registration, validation against the registries, errors, run ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from typer.testing import CliRunner

import ablate
from ablate.cli import app
from ablate.config import ConfigError, ModelConfig, build_config
from ablate.model import build_model
from ablate.model.plugins import _LOADED, _PLUGINS, check_interface, load_plugin
from ablate.study import load_study

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NORM_PLUGIN = '''
import torch, torch.nn as nn
import ablate

@ablate.register("norm", "{name}")
class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019): g * x / ||x||."""
    def __init__(self, cfg):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(cfg.d_model ** 0.5))
        self.eps = cfg.norm_eps
    def forward(self, x):
        return (self.g * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)){extra}
'''


def write_plugin(tmp_path: Path, name: str = "scalenorm", extra: str = "", file="my_norm.py"):
    path = tmp_path / file
    path.write_text(NORM_PLUGIN.format(name=name, extra=extra))
    return path


def test_registered_norm_is_built_and_listed(tmp_path, clean_registry):
    load_plugin(str(write_plugin(tmp_path)))
    cfg = build_config({"model.norm": "scalenorm", "model.d_model": 16, "model.n_heads": 2})
    model = build_model(cfg.model, 11)
    norm = model.blocks[0].attn_norm
    assert type(norm).__name__ == "ScaleNorm"
    x = torch.randn(2, 3, 16)
    # the formula, written independently of the plugin; in the model (of one member: the
    # plugin is not member-aware) it is called with the member dimension, and sees none
    assert torch.allclose(norm(x[None])[0], 4.0 * x / x.norm(dim=-1, keepdim=True))
    with pytest.raises(ConfigError) as err:
        build_config({"model.norm": "batchnorm"})
    assert "'layernorm', 'rmsnorm' or 'scalenorm'" in str(err.value)
    assert str(err.value).startswith("model.norm: ")


def test_register_decorator_in_process(clean_registry):
    @ablate.register("activation", "relu2_test")
    class SquaredReLU(nn.Module):
        def __init__(self, cfg: ModelConfig):
            super().__init__()
            self.w1 = nn.Linear(cfg.d_model, cfg.ff_dim)
            self.w2 = nn.Linear(cfg.ff_dim, cfg.d_model)

        def forward(self, x):
            return self.w2(F.relu(self.w1(x)) ** 2)

    cfg = build_config({"model.activation": "relu2_test"}).model
    model = build_model(cfg, 7)
    ffn = model.blocks[0].ffn
    x = torch.randn(3, 4, cfg.d_model)
    ref = F.linear(
        F.relu(F.linear(x, ffn.w1.weight, ffn.w1.bias)).pow(2), ffn.w2.weight, ffn.w2.bias
    )
    assert torch.allclose(ffn(x[None])[0], ref, atol=1e-6)
    assert ffn.w2 in model.residual_projections()  # gets the scaled init like built-ins


def test_import_failure_is_one_line_naming_the_plugin(tmp_path, clean_registry):
    bad = tmp_path / "broken.py"
    bad.write_text("import no_such_module_xyz\n")
    with pytest.raises(ConfigError) as err:
        load_plugin(str(bad), key="--plugin")
    msg = str(err.value)
    assert "\n" not in msg and "broken.py" in msg and "ModuleNotFoundError" in msg
    with pytest.raises(ConfigError, match="no such file"):
        load_plugin(str(tmp_path / "missing.py"))
    with pytest.raises(ConfigError, match="import failed"):
        load_plugin("no_such_pkg_xyz.module")


def test_name_registered_twice(tmp_path, clean_registry):
    with pytest.raises(ConfigError, match="'rmsnorm' is already registered"):
        load_plugin(str(write_plugin(tmp_path, name="rmsnorm")))
    load_plugin(str(write_plugin(tmp_path, file="a.py")))
    with pytest.raises(ConfigError, match="'scalenorm' is already registered .*a"):
        load_plugin(str(write_plugin(tmp_path, file="b.py")))


class NotAModule:
    def __init__(self, cfg):
        pass


class WrongShape(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, 3)

    def forward(self, x):
        return self.proj(x)


class NeedsTwoArgs(nn.Module):
    def __init__(self, cfg, other):
        super().__init__()


@pytest.mark.parametrize(
    "cls, axis, match",
    [
        (NotAModule, "norm", "must be a torch.nn.Module subclass"),
        (WrongShape, "norm", r"maps an input of shape \(2, 5, 16\) to \(2, 5, 3\)"),
        (WrongShape, "activation", "expected"),
        (NeedsTwoArgs, "norm", "cannot be built from a ModelConfig"),
        (WrongShape, "pos_encoding", "must subclass .*NoPositions"),
        (WrongShape, "arch", "must subclass .*LanguageModel"),
        (WrongShape, "norm_placement", "final_norm"),
    ],
)
def test_interface_errors(cls, axis, match):
    with pytest.raises(ConfigError, match=match):
        check_interface(axis, "x", cls)


def test_bad_interface_via_cli_exits_2(tmp_path, clean_registry):
    path = write_plugin(tmp_path, extra="[..., :3]")
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"base": {"model.norm": "scalenorm"}}))
    res = CliRunner().invoke(app, ["plan", str(study), "--plugin", str(path)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "my_norm.py" in lines[0] and "maps an input" in lines[0]


def test_run_id_follows_plugin_source(tmp_path, clean_registry):
    path = write_plugin(tmp_path)
    study = tmp_path / "s.yaml"
    study.write_text(
        yaml.safe_dump(
            {"plugins": ["./my_norm.py"], "grid": {"model.norm": ["layernorm", "scalenorm"]}}
        )
    )
    first = {r.config.model.norm: r.run_id for r in load_study(study).runs}
    again = {r.config.model.norm: r.run_id for r in load_study(study).runs}
    assert first == again
    # edit the plugin and import it as a new process would
    path.write_text(path.read_text().replace("clamp_min(self.eps)", "clamp_min(2 * self.eps)"))
    _LOADED.clear()
    edited = {r.config.model.norm: r.run_id for r in load_study(study).runs}
    assert edited["layernorm"] == first["layernorm"]  # runs not using the plugin keep their id
    assert edited["scalenorm"] != first["scalenorm"]
    assert load_study(study).plugins == (str(path.resolve()),)


def test_study_plugins_key_errors(tmp_path, clean_registry):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"plugins": ["./nope.py"]}))
    with pytest.raises(ConfigError, match=r"s.yaml: plugins\[0\]: plugin './nope.py': no such"):
        load_study(study)
    study.write_text(yaml.safe_dump({"plugins": {"a": 1}}))
    with pytest.raises(ConfigError, match="plugins: must be a list"):
        load_study(study)


def test_example_study_plans_and_trains(tmp_path, clean_registry):
    """The README's example: a squared-ReLU FFN plugin in a study; plan, then a 2-step run."""
    from ablate.execution.runner import run_study

    study = load_study(EXAMPLES / "squared_relu.yaml")
    assert {r.config.model.activation for r in study.runs} == {"relu", "gelu", "relu2"}
    tiny = [
        "train.max_steps=2",
        "train.eval_interval=2",
        "train.eval_batches=1",
        "train.final_eval_batches=1",
        "tracking.wandb=false",
        "model.activation=relu2",
        "model.d_model=16",
        "model.n_layers=1",
        "model.n_heads=2",
    ]
    src = tmp_path / "study.yaml"
    raw = yaml.safe_load((EXAMPLES / "squared_relu.yaml").read_text())
    raw.update(seeds=[0], grid={}, plugins=[str(EXAMPLES / "squared_relu.py")])
    src.write_text(yaml.safe_dump(raw))
    results = run_study(src, overrides=tiny, store=tmp_path / "runs", progress=False)
    assert [r["status"] for r in results] == ["completed"]
    meta = yaml.safe_load(
        next((tmp_path / "runs" / "squared_relu").glob("*/run.yaml")).read_text()
    )["meta"]
    assert meta["plugin_sources"]["activation"]["name"] == "relu2"
    assert meta["plugins"] == [str((EXAMPLES / "squared_relu.py").resolve())]


class BlockOfX(nn.Module):
    """A block whose forward takes only ``x``: the model calls ``block(x, rotary, attn_bias)``."""

    final_norm = True

    def __init__(self, cfg):
        super().__init__()

    def forward(self, x):
        return x


def test_a_block_taking_only_x_fails_at_plan_in_one_line_naming_the_call(tmp_path):
    path = tmp_path / "block_x.py"
    path.write_text(
        "import ablate, torch.nn as nn\n"
        "@ablate.register('norm_placement', 'only_x')\n"
        "class OnlyX(nn.Module):\n"
        "    final_norm = True\n"
        "    def __init__(self, cfg):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        return x\n"
    )
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"base": {"model.norm_placement": "only_x"}}))
    res = CliRunner().invoke(app, ["plan", str(study), "--plugin", str(path)])
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert "block(x, rotary, attn_bias)" in line and "block_x.py" in line


def test_an_attention_plugin_subclasses_the_base_and_trains(clean_registry):
    from ablate.model.transformer import ATTENTIONS, CausalSelfAttention

    class SoftCapAttention(CausalSelfAttention):
        """Logits capped by ``c tanh(s / c)`` (Gemma 2), in explicit matmuls."""

        def attend(self, q, k, v, attn_bias):
            s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
            s = 30.0 * torch.tanh(s / 30.0)
            T = q.size(-2)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            return torch.softmax(s, -1) @ v

    try:
        ablate.register("attention", "softcap")(SoftCapAttention)
        model = build_model(build_config({"model.attention": "softcap"}).model, 11, members=3)
        assert model(torch.zeros(3, 2, 5, dtype=torch.long)).shape == (3, 2, 5, 11)
        with pytest.raises(ConfigError, match="must subclass .*CausalSelfAttention"):
            check_interface("attention", "x", BlockOfX)
    finally:
        ATTENTIONS.pop("softcap", None)
        _PLUGINS.pop(("attention", "softcap"), None)


def test_an_unknown_name_says_which_plugins_are_loaded(clean_registry, tmp_path):
    with pytest.raises(ConfigError, match="no plugin loaded on this axis.*plugins: entry"):
        build_config({"model.norm": "scalenorm"})
    load_plugin(str(write_plugin(tmp_path)))
    with pytest.raises(ConfigError, match="plugins loaded: scalenorm on this axis"):
        build_config({"model.norm": "qnorm"})


def test_a_plugin_that_registers_nothing_is_told_so(clean_registry, tmp_path):
    """A plugin file whose class lacks @ablate.register changes nothing: it is one line
    saying so, naming the plugin (it was "no plugin loaded on this axis", with the study's
    plugins: entry right there)."""
    (tmp_path / "forgot.py").write_text(NORM_PLUGIN.format(name="relu2", extra="").replace(
        '@ablate.register("norm", "relu2")\n', ""
    ))  # fmt: skip
    study = tmp_path / "s.yaml"
    study.write_text(
        yaml.safe_dump({"plugins": ["./forgot.py"], "base": {"model.activation": "relu2"}})
    )
    res = CliRunner().invoke(app, ["plan", str(study), "--no-estimate"])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert "plugins[0]: plugin './forgot.py' registers nothing" in line
    assert "@ablate.register(axis, name)" in line and "no plugin loaded" not in line


def test_a_name_registered_on_another_axis_says_which(clean_registry, tmp_path):
    load_plugin(str(write_plugin(tmp_path, name="relu2")))  # a norm, meant as an activation
    with pytest.raises(ConfigError, match="register no activation, only norm 'relu2'"):
        build_config({"model.activation": "relu2"})


def test_a_plugin_studys_report_keeps_its_claims_from_another_directory(
    make_study, tmp_path, clean_registry
):
    """The store keeps the study with its plugin files beside it, so ``ablate report NAME``
    run elsewhere loads the plugin and decides the claims (it used to warn and drop them)."""
    import shutil
    import subprocess
    import sys

    from ablate.execution.runner import run_study

    shutil.copy(EXAMPLES / "squared_relu.py", tmp_path / "relu2.py")
    claim = {"id": "relu2-beats-relu", "text": "squared ReLU beats ReLU", "expect": "better"}
    claim |= {"a": {"model.activation": "relu2"}, "b": {"model.activation": "relu"}}
    path = make_study(
        "plugged",
        grid={"model.activation": ["relu", "relu2"]},
        seeds=[0, 1],
        plugins=["./relu2.py"],
        claims=[claim],
    )
    store = tmp_path / "runs"
    run_study(path, store=store, progress=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "ablate", "report", "plugged", "--store", str(store)]
        + ["--out", str(tmp_path / "rep")],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "plugin" not in res.stderr.lower(), res.stderr
    report = (tmp_path / "rep" / "plugged" / "report.md").read_text()
    assert "relu2-beats-relu" in report
    kept = yaml.safe_load((store / "plugged" / "study.yaml").read_text())
    assert kept["plugins"] == ["./plugins/0_relu2.py"]


# --- member-aware plugins: stacked, or alone -----------------------------------------------------


class MemberScaleNorm(nn.Module):
    """ScaleNorm for k members at once: one learned gain per member."""

    member_aware = True

    def __init__(self, cfg, members=1):
        super().__init__()
        self.g = nn.Parameter(torch.full((members, 1, 1, 1), cfg.d_model**0.5))
        self.eps = cfg.norm_eps

    def forward(self, x):  # (k, B, T, d)
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)


class ClaimsMembersButHoldsALinear(nn.Module):
    member_aware = True

    def __init__(self, cfg, members=1):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(x)


class MixesMembers(MemberScaleNorm):
    def forward(self, x):
        return super().forward(x) + x.mean(0, keepdim=True)  # every member reads the others


def test_a_member_aware_plugin_stacks_and_one_that_is_not_trains_alone(tmp_path, clean_registry):
    from ablate.stacking import not_stackable

    ablate.register("norm", "scalenorm_k")(MemberScaleNorm)
    cfg = build_config({"model.norm": "scalenorm_k", "model.d_model": 16, "model.n_heads": 2})
    assert not_stackable(cfg) is None
    model = build_model(cfg.model, 11, members=3)
    assert model.blocks[0].attn_norm.g.shape == (3, 1, 1, 1)
    assert model(torch.zeros(3, 2, 5, dtype=torch.long)).shape == (3, 2, 5, 11)
    load_plugin(str(write_plugin(tmp_path)))  # ScaleNorm written for one run
    one = build_config({"model.norm": "scalenorm", "model.d_model": 16, "model.n_heads": 2})
    why = "model.norm scalenorm: ScaleNorm computes one run (not member-aware)"
    assert not_stackable(one) == why


@pytest.mark.parametrize(
    "cls, match",
    [
        (ClaimsMembersButHoldsALinear, r"tensor 'proj.weight' has shape \(16, 16\), not 2 members"),
        (MixesMembers, "member 0's output changed with member 1's input"),
    ],
)
def test_a_wrong_member_aware_claim_is_refused_at_registration(cls, match):
    with pytest.raises(ConfigError, match=match):
        check_interface("norm", "x", cls)
