"""A Ray cluster (or a local Ray): each run is one Ray task, placed by Ray's scheduler.

Resources per run: ``num_gpus = gpus_per_run / runs_per_gpu`` (so k runs share one GPU, each
capped at 1/k of its memory) when the cluster has GPUs and the run trains on one, else 0; and
``num_cpus`` = the run's torch threads on CPU, or its share of the CPUs that come with a GPU.
``max_retries`` re-queues a run whose worker process or node died; the retry takes the lease
over (same Ray task id, see ablate/store/lease.py) and resumes from the last checkpoint.

Ctrl-C cancels every task (a running one gets a KeyboardInterrupt, which stops its run at the
next step boundary with an ``interrupted`` checkpoint) and waits for them, so every run resumes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ablate.config import ConfigError, RunConfig
from ablate.execution.executors import ExecutorOptions, Progress, RunTask, register_executor

log = logging.getLogger("ablate")

POLL_S = 0.5
CONNECT_TIMEOUT_S = 3.0
ADDRESS_KEY = "--executor-opt address"
STOP_WAIT_S = 120.0  # how long a Ctrl-C waits for cancelled runs to save their checkpoints
AUTH_MODE_ENV = "RAY_AUTH_MODE"


@register_executor
class RayOptions(ExecutorOptions):
    """A Ray cluster, or a local Ray started for the study: one Ray task per run."""

    executor: Literal["ray"] = "ray"
    address: str | None = None
    """``auto`` (the cluster ``ray start --head`` started), ``HOST:PORT`` of a running
    cluster, or None to start a local Ray for this study."""
    runs_per_gpu: int = Field(1, ge=1)
    """Runs packed on one GPU, each capped at 1/k of its memory."""
    gpus_per_run: int = Field(1, ge=0)
    """GPUs one run uses; 0 trains on CPU."""
    max_retries: int = Field(3, ge=0)
    """Re-queue the run of a worker process or node that died, this often."""

    extra: ClassVar[str | None] = "ray"

    @model_validator(mode="after")
    def _packing(self) -> RayOptions:
        if self.runs_per_gpu > 1 and self.gpus_per_run > 1:
            raise ValueError("runs_per_gpu > 1 packs runs of one GPU each: use gpus_per_run 1")
        return self

    def check(self) -> None:
        super().check()
        if self.address:
            check_address(self.address)

    def execute(self, tasks: list[RunTask], progress: Progress) -> None:
        execute(tasks, opts=self, progress=progress)

    def where(self, tasks: Sequence[RunTask]) -> str:
        return f"on Ray ({self.address or 'local'})"


def _address_file() -> Path:
    try:  # Ray's own notion of its temp dir (RAY_TMPDIR, ...); private, so guarded
        from ray._common.utils import get_ray_address_file

        return Path(get_ray_address_file(None))
    except Exception:  # noqa: BLE001
        return Path("/tmp/ray/ray_current_cluster")


def _resolve(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of the GCS (or Ray client server) an address names; None if unknown."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address:  # `ray start --head` records its address here
            try:
                address = _address_file().read_text().strip()
            except OSError:
                return None
    default_port = 10001 if address.startswith("ray://") else 6379
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host:
        host, port = hostport, str(default_port)
    try:
        return host, int(port)
    except ValueError:
        return None


def check_address(address: str) -> None:
    """A one-line ``ConfigError`` within seconds if nothing answers at ``address``."""
    where = _resolve(address)
    if where is None:
        raise ConfigError(
            f"no running Ray cluster found for {address!r} (start one with `ray start --head`)",
            key=ADDRESS_KEY,
        )
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise ConfigError(
            f"no Ray cluster answers at {where[0]}:{where[1]} ({err.strerror or err})",
            key=ADDRESS_KEY,
        ) from None


def task_options(cfg: RunConfig, opts: RayOptions, cluster: dict[str, float]) -> dict:
    """Ray resources for one run on a cluster with ``cluster`` resources (pure)."""
    gpus, cpus = float(cluster.get("GPU", 0)), float(cluster.get("CPU", 1))
    if gpus > 0 and cfg.train.accelerator != "cpu" and opts.gpus_per_run > 0:
        num_gpus = opts.gpus_per_run / opts.runs_per_gpu
        num_cpus = min(1.0, cpus / gpus * num_gpus)  # its share of the CPUs beside a GPU
    else:
        num_gpus, num_cpus = 0.0, float(cfg.train.threads or 1)
    return {"num_gpus": num_gpus, "num_cpus": num_cpus, "max_retries": opts.max_retries}


def _train_task(
    cfgs: list[RunConfig], paths: list[str], metas: list[dict], grace, fraction, workers: int
):
    """Runs in a Ray worker: one run (lists of one) or a stacked group, under the leases."""
    import ray
    import torch

    from ablate.execution.worker import execute_task, interrupted

    # the task id survives retries: a retried run may take its dead attempt's lease over
    os.environ["ABLATE_JOB_ID"] = f"ray:{ray.get_runtime_context().get_task_id()}"
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(cfgs[0].train.threads or max(1, int(cpus)))
    if fraction is not None and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
    try:
        return execute_task(cfgs, paths, metas, lease_grace_s=grace, workers=workers)
    except (KeyboardInterrupt, SystemExit):
        return interrupted(paths)


def _token_auth_if_available() -> None:
    """Send the Ray auth token to an explicit address, like ``ray.init`` does for ``auto``.

    ``ray start --head`` turns token authentication on when a token exists (``ray.init()``
    writes ``~/.ray/auth_token`` for every local cluster), but Ray only sends the token to a
    cluster it found itself: ``address=HOST:PORT`` would be refused for 20 s and then
    fail. A cluster without authentication ignores the token. ``RAY_AUTH_MODE`` set by the user
    is left alone.
    """
    if AUTH_MODE_ENV in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
    if os.environ.get("RAY_AUTH_TOKEN") or Path(path).is_file():
        os.environ[AUTH_MODE_ENV] = "token"
        try:  # Ray read its config at import: re-read it (private API, so guarded)
            from ray._raylet import Config

            Config.initialize("")
        except Exception as err:  # noqa: BLE001 - an older Ray without token auth
            log.debug("ray config refresh: %s", err)


def connect(opts: RayOptions):
    """``ray`` after ``ray.init`` (an existing session is reused); True if we started it."""
    import ray

    if ray.is_initialized():
        return ray, False
    # no address: a new local Ray for this study ("local"), never whatever cluster the address
    # file in /tmp/ray names (it outlives a `ray start` that was not stopped with `ray stop`)
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False}
    kwargs["log_to_driver"] = False
    if opts.address:
        check_address(opts.address)
        kwargs["address"] = opts.address
        _token_auth_if_available()
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, TimeoutError) as err:
        # something answered the port check but is not a Ray cluster (or went away since)
        msg = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise ConfigError(msg, key=ADDRESS_KEY) from None
    return ray, True


def execute(tasks: list[RunTask], *, opts: RayOptions, progress: Progress) -> None:
    if not tasks:
        return
    ray, started = connect(opts)
    try:
        _run(ray, tasks, opts, progress)
    finally:
        if started:
            ray.shutdown()


def _run(ray, tasks: list[RunTask], opts: RayOptions, progress: Progress) -> None:
    remote = ray.remote(_train_task)
    cluster = ray.cluster_resources()
    refs: dict[Any, RunTask] = {}
    for t in tasks:
        o = task_options(t.config, opts, cluster)
        fraction = o["num_gpus"] if 0 < o["num_gpus"] < 1 else None
        ref = remote.options(**o).remote(*t.payload(), opts.lease_grace_s, fraction, t.workers)
        refs[ref] = t
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            progress.poll()
            for ref in done:
                t = refs[ref]
                try:
                    results = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - retries exhausted: report, go on
                    results = t.failed(_short(err))
                if t.report(results, progress):  # a task was stopped from outside
                    raise KeyboardInterrupt
    except BaseException:
        _cancel(ray, pending)
        raise


def _cancel(ray, refs: list) -> None:
    """Cancel queued tasks and interrupt running ones, then wait for their checkpoints."""
    if not refs:
        return
    print("stopping Ray tasks (saving checkpoints) ...", flush=True)
    for ref in refs:
        try:
            ray.cancel(ref, force=False)
        except Exception as err:  # noqa: BLE001 - already finished
            log.debug("cancel: %s", err)
    deadline = time.time() + STOP_WAIT_S
    left = list(refs)
    while left and time.time() < deadline:
        try:
            _, left = ray.wait(left, num_returns=len(left), timeout=POLL_S)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            break


def _short(err: Exception) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
