"""Parallel layouts on torch.distributed (gloo on CPU, NCCL on GPU): Layout(tp, ep, dp) per side.

The regions a layout splits run in the contract's layout arithmetic (policy.py; the fixed tree in
tree.py), so rollout and trainer in different layouts compute the same bits (gate C06).
tensor_parallel.py and expert_parallel.py split the linear, log-prob and MoE regions, reached via
kernels/contract/dispatch.py; the trainer's data parallelism is kernels/trainer/data_parallel.py.
"""
