"""Tests of the harness package, mirroring its source tree."""
