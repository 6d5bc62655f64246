"""Kept for tests/test_slurm.py only, which still imports these two checks from here: delete this
file once it asks conftest.py for the fixtures of the same names (as test_ray.py does)."""

from conftest import _assert_same_as_local as assert_same_as_local  # noqa: F401
from conftest import _interrupt_first_run_at_step_12 as interrupt_first_run_at_step_12  # noqa: F401
