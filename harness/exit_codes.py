"""The harness's exit codes, shared by every verb: 0 clean, 1 bad input, 2 different (a gate
failed, a divergence was found), 3 inconclusive (locate could not name a first divergence)."""
EXIT_OK, EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_INCONCLUSIVE = 0, 1, 2, 3
