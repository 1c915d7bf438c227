"""Float64 reference of linear: y[M, N] = x[M, K] @ w[N, K]^T."""


def linear(x, w):
    """[..., K] x [N, K] -> [..., N] in float64."""
    return x.double() @ w.double().T
