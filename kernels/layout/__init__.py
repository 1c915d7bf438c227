"""Parallel layouts on torch.distributed (gloo on CPU, NCCL on GPU): Layout(tp, ep, dp) per
side, the process groups, and the regions a layout splits run in the contract's layout
arithmetic (policy.py), so that rollout and trainer in different layouts compute the same
bits (gate C06).

  layout.py           Layout, SideLayouts: what each side's configuration names
  launch.py, groups.py processes on one machine; process groups, collectives, comm fingerprint
  tree.py             the fixed leaves and the pairwise reduction tree
  tensor_parallel.py  column/row-parallel linear regions, vocab-parallel log-prob
  expert_parallel.py  MoE experts over ranks: all-to-all dispatch, routing-order combine
The region door that routes split regions here is kernels/contract/dispatch.py; the trainer's
data-parallel orchestration is kernels/trainer/data_parallel.py.
"""
