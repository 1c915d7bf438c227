"""Log-probability of chosen tokens: logp = x[t] - logsumexp(x), x = logits / temperature, in fp32.

Also the full log-softmax. Engines and trainers usually reach this number by different formulas
(log_softmax then gather; x[t] - logsumexp(x)): equal algebraically, not bitwise. The consistent
variant is one formula with one row reduction in a batch-independent order, called by both sides:
on CPU torch ops (kernels/ops/reduction.py), on CUDA Triton kernels over vocabulary chunks fixed
by V that read the logits as they come (rows_triton.py; the trainer reaches the same kernels
through autograd).
Reference: gates/reference/logprob.py.
"""
from kernels.ops.logprob import consistent, fast

VARIANTS = {"fast_log_softmax": fast.fast_log_softmax, "fast_logsumexp": fast.fast_logsumexp,
            "consistent": consistent.consistent}
CALL_KEYWORDS = {"full"}
