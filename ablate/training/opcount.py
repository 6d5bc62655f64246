"""What a training step costs a GPU's host, counted on any device: aten operations that launch
a kernel, reads of a value back to the host, and Python function calls.

Every aten operation dispatched on a CUDA tensor is at least one kernel launch (several
microseconds of host time); a small model's step is bound by launches long before the GPU's
arithmetic. A ``TorchDispatchMode`` sees each dispatched operation once, on the CPU as on
CUDA, so the count can be asserted in a test.
Operations that only make a new view of existing memory (views, transposes, ``detach``) or only
allocate (``empty``) launch nothing and are left out.

A host read (``aten._local_scalar_dense``: ``.item()``, ``bool(t)``, ``float(t)``; ``equal``;
``tolist``, ``cpu``, ``numpy``) waits for the GPU to finish everything queued before it.

Python function calls (``PythonCalls``: ``sys.setprofile``'s "call" events on this thread) are
the rest of a step's host time: on a GPU the host must dispatch a step's kernels faster than the
GPU runs them, and a small model's step runs them in a few milliseconds. Like the operations,
the count does not depend on the machine.

``count_process`` counts a whole process (Lightning's loop, callbacks and loggers included)
from outside: a ``sitecustomize.py`` on ``PYTHONPATH`` that calls it is loaded into every
process of a command, the workers ``ablate run`` spawns included
(``tests/training/test_step_cost.py``).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# metadata only: a new view or an allocation, no kernel
NO_KERNEL = {
    aten.view, aten._unsafe_view, aten._reshape_alias, aten.as_strided, aten.t, aten.transpose,
    aten.permute, aten.expand, aten.unsqueeze, aten.squeeze, aten.select, aten.slice,
    aten.split, aten.split_with_sizes, aten.unbind, aten.chunk, aten.narrow, aten.alias,
    aten.detach, aten.lift_fresh, aten.empty, aten.empty_like, aten.empty_strided,
    aten.new_empty, aten.new_empty_strided, aten.is_same_size, aten.sym_size, aten.sym_stride,
    aten.sym_numel, aten.sym_storage_offset, aten.set_, aten.resize_,
    aten.view_as_real, aten.view_as_complex, aten.unfold, aten.diagonal, aten.movedim,
    aten.expand_as, aten.view_as, aten.flatten, aten.unflatten, aten.reshape,
}  # fmt: skip
# profiler marks (``record_function``, which Lightning wraps its hooks in)
NO_KERNEL |= {
    torch.ops.profiler._record_function_enter_new,
    torch.ops.profiler._record_function_exit,
}
HOST_READ_OPS = {aten._local_scalar_dense, aten.equal, aten.is_nonzero}
HOST_READ_METHODS = {torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy}


class _Methods(TorchFunctionMode):
    """Tensor methods that copy to the host without an aten operation on a CPU tensor."""

    def __init__(self, counts: Counter):
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_READ_METHODS:
            self.counts[func.__name__] += 1
        return func(*args, **(kwargs or {}))


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as c: ...``: ``c.ops`` counts kernel-launching aten operations by
    name, ``c.reads`` the host reads; ``c.kernels`` and ``c.host_reads`` are their totals."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.reads: Counter = Counter()
        self._methods = _Methods(self.reads)

    def __enter__(self):
        self._methods.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._methods.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in HOST_READ_OPS:
            self.reads[packet.__name__] += 1
        if packet not in NO_KERNEL:
            self.ops[packet.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def kernels(self) -> int:
        return sum(self.ops.values())

    @property
    def host_reads(self) -> int:
        return sum(self.reads.values())


class PythonCalls:
    """``with PythonCalls() as c: ...``: ``c.calls`` counts the Python function calls made on
    this thread inside (``sys.setprofile``'s "call" events: Python functions and generator
    resumptions; functions written in C are not Python calls)."""

    def __init__(self):
        self.calls = 0

    def _count(self, frame, event, arg) -> None:
        if event == "call":
            self.calls += 1

    def __enter__(self):
        self._previous = sys.getprofile()
        sys.setprofile(self._count)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous)


def count_process(out_dir: str | Path) -> OpCounter:
    """Count everything this process dispatches from now on (on this thread, the one that
    trains) and write the counts to ``<out_dir>/<pid>.json`` when it exits: ``ops`` and
    ``reads`` by name, ``kernels`` and ``host_reads`` their totals."""
    counter = OpCounter()
    counter.__enter__()
    path = Path(out_dir) / f"{os.getpid()}.json"

    def write() -> None:
        if path.exists():
            return  # one exit route already wrote it
        record = {"ops": dict(counter.ops), "reads": dict(counter.reads)}
        record |= {"kernels": counter.kernels, "host_reads": counter.host_reads}
        path.write_text(json.dumps(record, sort_keys=True))

    atexit.register(write)  # a plain process
    multiprocessing.util.Finalize(None, write, exitpriority=0)  # a pool worker skips atexit
    return counter
