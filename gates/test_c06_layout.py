"""Gate C06: layout consistency.

Passes when rollout and trainer run in different TP/EP/DP layouts (torch.distributed: gloo on
CPU, NCCL on GPU) give identical bits; until the layout issue lands there is no layout to vary,
so the gate is reported n/a with that reason and never passes. Negative control: none yet; it
comes with the layout issue (a contract whose reduction tree follows the TP size must fail).
"""


def test_layouts_give_identical_bits(gate):
    gate.inputs = {"layouts": []}
    gate.n_a("the layout issue (TP/EP/DP on torch.distributed) has not landed")
