"""What a training step costs a GPU's host, counted on the CPU: a stacked step of 6 members
dispatches at most 1.5x the kernel-launching aten operations of a solo step of the same model
(one SDPA call per layer for the whole stack), and neither path reads a value back to the host
on a step that does not log."""

import torch

from ablate.bench.stepcost import step_cost
from ablate.training.opcount import OpCounter

TINY = {
    "model.d_model": 32,
    "model.n_layers": 2,
    "model.n_heads": 2,
    "model.max_seq_len": 16,
    "data.seq_len": 16,
    "data.batch_size": 4,
    "train.eval_batches": 1,
    "train.final_eval_batches": 1,
    "train.threads": 1,
}


def test_the_counter_leaves_out_views_and_counts_host_reads():
    x = torch.ones(4, 3)
    with OpCounter() as c:
        y = x.reshape(12).view(3, 4).t().detach().unsqueeze(0)  # metadata only
        z = (y + 1).sum()
        assert z.item() == 24.0
        _ = z.tolist()
    assert dict(c.ops) == {"add": 1, "sum": 1, "_local_scalar_dense": 1}
    assert c.host_reads == 2 and c.kernels == 3


def _sdpa_calls(ops: dict[str, float]) -> float:
    return sum(v for k, v in ops.items() if "scaled_dot_product" in k and "backward" not in k)


def test_a_stack_of_6_costs_at_most_1_5_solo_steps_and_neither_reads_the_host():
    solo, stack = step_cost(TINY, 0), step_cost(TINY, 6)
    assert solo.host_reads == 0, solo.ops
    assert stack.host_reads == 0, stack.ops
    assert _sdpa_calls(solo.ops) == _sdpa_calls(stack.ops) == 2  # one per layer
    assert stack.kernels <= 1.5 * solo.kernels, (stack.kernels, solo.kernels, stack.ops)
