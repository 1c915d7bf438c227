"""Does BLOCK_K change the bits of the consistent Triton GEMM? Compares y under BLOCK_K 32, 64
and 128 (each with tiles that fit) for several M and shapes, bit for bit (int16 views).

  python benchmarks/gpu_gemm_block_k.py          (on the device)
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gpu_gemm import SHAPES  # noqa: E402
from kernels.ops.linear.triton import consistent  # noqa: E402

TILES = {32: (128, 128, 8, 4), 64: (128, 128, 8, 4), 128: (64, 64, 4, 3)}


def main() -> None:
    for name, (n, k) in SHAPES.items():
        generator = torch.Generator(device="cuda").manual_seed(7)
        x = torch.randn(4096, k, device="cuda", generator=generator).to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5).to(torch.bfloat16)
        for splits in (1, 4):
            outputs = {bk: consistent(x, w, config=tile, num_splits=splits, block_k=bk) for bk, tile in TILES.items()}
            small = {bk: consistent(x[:16].contiguous(), w, config=(16, 32, 2, 5), num_splits=splits, block_k=bk)
                     for bk in TILES}
            same = {bk: torch.equal(outputs[bk].view(torch.int16), outputs[64].view(torch.int16)) for bk in TILES}
            rows = {bk: torch.equal(small[bk].view(torch.int16), outputs[64][:16].view(torch.int16)) for bk in TILES}
            differing = {bk: int((outputs[bk].view(torch.int16) != outputs[64].view(torch.int16)).sum())
                         for bk in TILES}
            print(f"{name:<22} splits {splits}: equal to BLOCK_K 64 (M=4096) {same}; M=16 rows {rows}; "
                  f"elements differing {differing}")


if __name__ == "__main__":
    main()
