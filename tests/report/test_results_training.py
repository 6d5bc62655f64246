"""How each run trained, as the results layer reads it from the store (``trained.*`` and
``trained_as``): what its attempts recorded, or for a run from before they recorded it, what
its config and summary say."""

from ablate.results.read import recorded_way, trained_as, way_label

EAGER = {"stack": 1, "compile": False, "compile_mode": None, "cuda_graphs": False}


def test_the_label_says_stack_compile_and_graphs():
    assert way_label(EAGER) == "solo, eager"
    assert way_label(EAGER | {"stack": 4}) == "stack of 4, eager"
    compiled = EAGER | {"compile": True, "compile_mode": "default"}
    assert way_label(compiled) == "solo, compiled"
    graphs = compiled | {"stack": 8, "compile_mode": "reduce-overhead", "cuda_graphs": True}
    assert way_label(graphs) == "stack of 8, compiled, CUDA graphs"
    # reduce-overhead on a CPU: no graphs, the mode is still said
    cpu = compiled | {"compile_mode": "reduce-overhead"}
    assert way_label(cpu) == "solo, compiled, reduce-overhead"


def test_every_attempt_counts_in_order():
    solo, stack = EAGER, EAGER | {"stack": 4, "compile": True, "compile_mode": "default"}
    summary = {
        "training": stack,
        "attempts": [{"pid": 1, "training": solo}, {"pid": 2, "training": solo}]
        + [{"pid": 3, "training": stack}],
    }
    assert trained_as(summary, {}) == "solo, eager then stack of 4, compiled"
    assert recorded_way(summary, {}) == stack  # the trained.* columns: the last attempt's


def test_a_run_from_before_the_record_is_read_from_its_config_and_summary():
    config = {"train": {"compile": False, "compile_mode": "default"}}
    assert recorded_way({}, config) == EAGER
    assert trained_as({"attempts": [{"pid": 1}]}, config) == "solo, eager"
    stacked = {"stack": {"members": 3, "runs": ["a", "b", "c"]}}
    assert trained_as(stacked, config) == "stack of 3, eager"
    graphs = {"train": {"compile": True, "compile_mode": "reduce-overhead"}}
    on_gpu = {"environment": {"device": "NVIDIA H200"}}
    assert recorded_way(on_gpu, graphs)["cuda_graphs"] is True
    assert recorded_way({"environment": {"device": "cpu"}}, graphs)["cuda_graphs"] is False
