"""The routing weights of the chosen experts, both top-k variants: unbiased scores over their sum
(each variant passes its own sum), times `scaling`."""


def _normalised(scores, ids, scaling, total):
    chosen = scores.gather(1, ids)
    return chosen / (total(chosen) + 1e-20) * scaling
