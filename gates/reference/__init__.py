"""Float64 references, one module per op family: the math each op computes, written plainly.

Every function upcasts its inputs to float64 and computes there, with no rounding back to the
activation dtype, so a consistent op is judged against the exact formula up to float64 error.
Part of the apparatus: frozen while kernels are optimised; agents never edit it.
"""
