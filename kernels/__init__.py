"""The code under alignment: op families (fast and consistent side by side), the execution
contract, one model definition per family, a rollout engine and a trainer.

`kernels` imports nothing from `harness` or `gates`: dependencies point one way.
"""
