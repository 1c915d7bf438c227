"""benchmarks/op_counts.py: ops are counted under the region that issued them, view ops are
not counted, the two contracts' counts come out apart, and the region door is put back."""
from benchmarks import op_counts
from gates.workload import EngineShape, Workload
from kernels.contract import dispatch as region_door


def test_ops_are_counted_per_region_and_the_door_is_restored():
    door = region_door.RegionDispatch.__call__
    workload = Workload(num_sequences=2, new_tokens=2, min_prompt_len=4, max_prompt_len=6, arrival_spread=1, seed=3)
    counts = {name: op_counts.count("qwen3", name, workload, EngineShape(tokens_per_step=64, max_running=2))
              for name in ("consistent", "fast")}
    assert region_door.RegionDispatch.__call__ is door
    for name, counted in counts.items():
        regions = {region for region, _ in counted}
        assert {"qkv_proj", "attention", "sampler", "engine"} <= regions, (name, regions)
        assert all(n > 0 for n in counted.values())
    # the consistent sampler truncates and races per row where the fast one draws once
    assert counts["consistent"] != counts["fast"]


def test_view_ops_are_not_counted():
    import torch
    counter = op_counts.OpCounter()
    x = torch.randn(4, 6)
    with counter:
        x.view(6, 4).t()[1:3].unsqueeze(0).expand(2, 2, 6)  # views only
        x.t().reshape(24)  # a reshape that must copy: one op
        x + 1  # one op
    assert sum(counter.counts.values()) == 2
