"""Op families, one file each; every file holds the fast variant(s) and the consistent
variant side by side. `kernels.ops.registry` names them for the contract."""
