"""The gates' targets: our kernels, and outside stacks through the same two calls (gates/target.py)."""
