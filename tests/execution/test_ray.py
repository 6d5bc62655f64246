"""The Ray executor on a real local Ray (started once for this module: it costs seconds)."""

import os
import time

import pytest

from ablate.config import ConfigError, RunConfig
from ablate.execution.executors.ray import RayOptions
from ablate.execution.runner import run_study

pytestmark = pytest.mark.usefixtures("no_wandb")  # make_study and the executor checks: conftest

ray = pytest.importorskip("ray", reason='pip install "ablate[ray]"')


@pytest.fixture(scope="session")
def local_ray():
    """One logical GPU on a CPU machine: Ray schedules by declared resources, not hardware."""
    if not ray.is_initialized():
        ray.init(
            address="local",  # a new cluster, whatever /tmp/ray's address file says
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=80 * 1024**2,
        )
    yield ray
    ray.shutdown()


def test_four_runs_at_a_quarter_gpu_share_one_gpu_at_once(local_ray, tmp_path):
    from ablate.execution.executors.ray import task_options

    gpu_run = RunConfig.model_validate({"train": {"accelerator": "gpu"}})
    opts = task_options(gpu_run, RayOptions(runs_per_gpu=4), local_ray.cluster_resources())
    assert opts["num_gpus"] == 0.25 and opts["num_cpus"] == 0.5

    @local_ray.remote
    def meet(folder, n):
        """Check in, then wait until all n tasks have checked in: only possible if n run at once
        (however slowly their worker processes start)."""
        import pathlib
        import uuid

        pathlib.Path(folder, uuid.uuid4().hex).touch()
        deadline = time.time() + 90
        while len(list(pathlib.Path(folder).iterdir())) < n and time.time() < deadline:
            time.sleep(0.05)
        return len(list(pathlib.Path(folder).iterdir())), local_ray.get_gpu_ids()

    met = local_ray.get([meet.options(**opts).remote(str(tmp_path), 4) for _ in range(4)])
    assert [n for n, _ in met] == [4, 4, 4, 4]  # all four were running at one moment
    assert all(len(ids) == 1 for _, ids in met)  # each sees the one (shared) GPU

    cpu_run = RunConfig.model_validate({"train": {"accelerator": "cpu", "threads": 2}})
    cpu = task_options(cpu_run, RayOptions(runs_per_gpu=4), local_ray.cluster_resources())
    assert cpu["num_gpus"] == 0 and cpu["num_cpus"] == 2


def test_a_study_trains_through_ray_like_it_does_locally(
    local_ray, make_study, tmp_path, capsys, interrupt_first_run_at_step_12, assert_same_as_local
):
    path = make_study()
    store = tmp_path / "ray"
    interrupt_first_run_at_step_12(path, store)
    capsys.readouterr()
    opts = RayOptions(max_retries=1)
    results = run_study(path, store=store, progress=False, executor=opts)
    out = capsys.readouterr().out
    assert "on Ray" in out and "activation=gelu,seed=0: completed" in out  # streamed back
    assert_same_as_local(results, run_study(path, store=tmp_path / "local", progress=False))
    assert os.getpid() not in {r["attempts"][-1]["pid"] for r in results}  # Ray workers
    again = run_study(path, store=store, progress=False, executor=opts)
    assert "2 finished, 0 to train" in capsys.readouterr().out
    assert [len(r["attempts"]) for r in again] == [2, 1]


def test_a_ray_address_that_does_not_answer_fails_within_seconds(make_study, tmp_path):
    t0 = time.time()
    with pytest.raises(ConfigError, match="address.*no Ray cluster answers"):
        run_study(
            make_study(),
            store=tmp_path / "runs",
            progress=False,
            executor=RayOptions(address="127.0.0.1:9"),
        )
    assert time.time() - t0 < 10
    assert not (tmp_path / "runs").exists()


def test_auto_without_a_running_cluster_says_how_to_start_one(tmp_path, monkeypatch):
    import ablate.execution.executors.ray as ray_executor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_executor, "_address_file", lambda: tmp_path / "none")
    with pytest.raises(ConfigError, match="no running Ray cluster.*ray start --head"):
        ray_executor.check_address("auto")
    (tmp_path / "none").write_text("127.0.0.1:9\n")  # a cluster that has gone away
    with pytest.raises(ConfigError, match="no Ray cluster answers at 127.0.0.1:9"):
        ray_executor.check_address("auto")


@pytest.mark.parametrize(
    ("mode", "token_file", "token_env", "expected"),
    [
        (None, False, False, None),  # no token anywhere: Ray's default, untouched
        (None, True, False, "token"),  # `ray start --head` enabled auth with this token
        (None, False, True, "token"),
        ("disabled", True, False, "disabled"),  # the user's choice stands
    ],
)
def test_an_explicit_address_sends_the_auth_token_when_there_is_one(
    monkeypatch, tmp_path, mode, token_file, token_env, expected
):
    """`ray start --head` turns token auth on when ~/.ray/auth_token exists, but ray.init only
    sends the token to a cluster it found itself ("auto"), not to HOST:PORT."""
    from ablate.execution.executors.ray import AUTH_MODE_ENV, _token_auth_if_available

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in (AUTH_MODE_ENV, "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    if mode:
        monkeypatch.setenv(AUTH_MODE_ENV, mode)
    if token_file:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("x" * 32)
    if token_env:
        monkeypatch.setenv("RAY_AUTH_TOKEN", "x" * 32)
    _token_auth_if_available()
    assert os.environ.get(AUTH_MODE_ENV) == expected


def test_a_stacked_group_is_one_ray_task(
    local_ray, make_study, tmp_path, capsys, assert_stacked_like_solo
):
    path = make_study(grid={"optim.lr": [1e-3, 3e-3]}, seeds=[0, 1])
    opts = RayOptions(max_retries=1)
    results = run_study(
        path, store=tmp_path / "ray", overrides=["train.stack=4"], progress=False, executor=opts
    )
    out = capsys.readouterr().out
    assert "4 as 1 stacked groups" in out and out.count(": completed") == 4
    assert_stacked_like_solo(results, path, tmp_path, members=4)
    assert len({r["attempts"][-1]["pid"] for r in results}) == 1  # one Ray worker
    assert os.getpid() not in {r["attempts"][-1]["pid"] for r in results}
