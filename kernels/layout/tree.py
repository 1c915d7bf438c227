"""The fixed reduction tree and the leaves it adds.

A dim of `size` is cut into `num_leaves` (L) equal contiguous leaves whatever the degree d; rank r
owns leaves [r * L/d, (r+1) * L/d). The tree is pairwise by leaf index, ((p0 + p1) + (p2 + p3))
for four. With L and d powers of two a rank's leaves form whole subtrees: each rank adds its own,
the ranks' roots, gathered in rank order, meet in the same tree, and every d makes the same adds.
"""


def tree_sum(parts: list):
    """Pairwise by index, level by level; an odd last part moves up a level unchanged."""
    if not parts:
        raise ValueError("tree_sum: nothing to add")
    while len(parts) > 1:
        paired = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
        parts = paired + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def owned_leaves(size: int, num_leaves: int, rank: int, num_ranks: int, what: str) -> list:
    """[(lo, hi)] of the leaves `rank` owns out of `num_leaves` equal leaves of `size`."""
    if size % num_leaves:
        raise ValueError(f"{what}: {size} elements do not cut into {num_leaves} equal leaves")
    if num_leaves % num_ranks:
        raise ValueError(f"{what}: {num_leaves} leaves do not split over {num_ranks} ranks")
    width, per_rank = size // num_leaves, num_leaves // num_ranks
    return [(i * width, (i + 1) * width) for i in range(rank * per_rank, (rank + 1) * per_rank)]


class StreamingTreeSum:
    """tree_sum's additions over tensors, one part at a time, holding at most log2(n) + 1 partial sums: a
    part merges with the newest partial while both cover as many parts (a binary counter),
    and the end adds the partials newest first, which is where tree_sum carries an odd part.
    It owns the tensors it is given: the earlier operand of each addition takes the sum in
    place (a + b either way: IEEE addition commutes), so a merge allocates nothing."""

    def __init__(self):
        self._partials = []  # (parts covered, sum), counts strictly decreasing

    def add(self, part) -> None:
        count = 1
        while self._partials and self._partials[-1][0] == count:
            covered, partial = self._partials.pop()
            part, count = partial.add_(part), count + covered
        self._partials.append((count, part))

    def held(self) -> list:
        """The partial sums held now (what the tree costs in memory)."""
        return [partial for _, partial in self._partials]

    def total(self):
        if not self._partials:
            raise ValueError("tree_sum: nothing to add")
        total = self._partials[-1][1]
        for _, partial in reversed(self._partials[:-1]):
            total = partial.add_(total)
        return total
