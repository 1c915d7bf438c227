"""Tests of kernels/ops: its kernels and ops, mirroring the source tree."""
