"""kernels/ops/vector_math.py: a process that imports the ops computes its first VML op (the
rope table's float64 cos) on two threads with the bits of its rerun. Without the import about
one fresh process in six got one thread's half wrong (benchmarks/vml_first_call.py, RESULTS.md):
six processes here catch the guard's removal more often than not (1 - 0.83^6)."""
from benchmarks.vml_first_call import first_call_differences

PROCESSES = 6


def test_the_first_vml_op_after_import_equals_its_rerun():
    differing = [first_call_differences("kernels") for _ in range(PROCESSES)]
    assert differing == [0] * PROCESSES, f"values differing per fresh process: {differing}"

