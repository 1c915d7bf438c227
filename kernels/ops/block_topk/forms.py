"""What both contracts share: which compressed blocks a query may see, and the -1 sentinel."""
import torch


def visible(positions: torch.Tensor, num_blocks: int, compress_rate: int) -> torch.Tensor:
    """[T, S] bool: block s holds tokens s*m .. s*m + m - 1, complete once position s*m + m - 1
    is reached, so query position p sees s < (p + 1) // m."""
    blocks = torch.arange(num_blocks, device=positions.device)
    return blocks[None, :] < ((positions + 1) // compress_rate)[:, None]


def with_sentinel(chosen: torch.Tensor, positions: torch.Tensor, compress_rate: int, top_k: int) -> torch.Tensor:
    """chosen [T, <= top_k] as [T, top_k]: every block the query may not see, and every column
    past the blocks there are, -1 (one width in every phase, whatever the number of blocks)."""
    threshold = ((positions + 1) // compress_rate)[:, None]
    chosen = torch.where(chosen < threshold, chosen, torch.full_like(chosen, -1))
    return torch.cat([chosen, chosen.new_full((chosen.shape[0], top_k - chosen.shape[1]), -1)], dim=-1)
