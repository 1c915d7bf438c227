"""SplitMix64's constants: the golden increment and its two mixing multipliers, as unsigned
64-bit values. The CPU sampler's hash (kernels/ops/sampler/forms.py: mix_seed, race_uniforms) and
the fused CUDA draw (kernels/ops/sampler/triton.py) hash with these, so both draw the same
uniforms; a module of their own, so neither imports the other.
"""

SPLITMIX64 = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
