"""The test suite: a package, so that test modules in different folders may share a basename
(tests/ops/triton/test_sampler.py beside tests/ops/test_sampler.py) and tests/harness/ does not
shadow the harness package."""
