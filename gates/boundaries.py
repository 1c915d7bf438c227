"""The boundaries a gate's inputs must cross, read from the contract and the model config,
never hard-coded: the attention's key block (the widest `block_kv`, `tokens_per_split` or `split`
any case pins, else the fast kernels' key block) and the state's chunk (the Mamba scan's chunk, or
a compressor's widest window: the config's `state_window`). A fault that lives
at a boundary (a split that starts at the second key block, a chunk carried wrongly) shows
only in inputs on both sides of it, so the gates place probes there and record what they
crossed (`coverage`); a gate whose inputs crossed none fails as vacuous. `coverage` needs
no code under test: a gate that runs it in workers (gates/candidate.py) computes it itself.
"""
KEY_BLOCK_CONSTANTS = ("block_kv", "tokens_per_split", "split")  # attention constants that cut the keys
ATTENTION_REGIONS = ("attention", "sink_attention")
DEFAULT_KEY_BLOCK = 32  # the fast paged kernels' key block (kernels/ops/attention/fast.py FAST_BLOCK_KV)
DEFAULT_SSM_CHUNK = 16


def key_block(contract) -> int:
    """The widest key block any case's attention binding pins, or the fast kernels' where
    none is pinned: what the probes must run past."""
    from kernels.contract.regions import CASES
    pinned = [value for case in CASES for region in ATTENTION_REGIONS
              for name, value in contract.binding(region, case).constants if name in KEY_BLOCK_CONSTANTS]
    return max(pinned, default=DEFAULT_KEY_BLOCK)


def longest_constant(contract) -> int:
    """The largest integer constant any case's attention binding pins (a key block, a split
    size, a context past which a kernel changes its walk), 0 when none: a fault keyed on any
    of them shows only in a context past it, whatever its name."""
    from kernels.contract.regions import CASES
    return max((value for case in CASES for region in ATTENTION_REGIONS
                for _, value in contract.binding(region, case).constants
                if isinstance(value, int) and not isinstance(value, bool)), default=0)


def state_chunk(config):
    """The tokens a sequence's carried state is cut into: Mamba's chunk, a compressor's widest
    window (`state_window`), None for a model whose state is its keys alone."""
    return getattr(config, "chunk_size", None) or getattr(config, "state_window", None)


def ssm_chunk(config) -> int:
    return state_chunk(config) or DEFAULT_SSM_CHUNK


def boundaries(contract, config) -> dict:
    """What a worker reports for check_crossed: the key block, the state's chunk (None without
    one)."""
    return {"key_block": key_block(contract), "ssm_chunk": state_chunk(config)}


def coverage(lengths, block: int, chunk: int) -> dict:
    """Which boundaries contexts of `lengths` tokens crossed: key blocks and SSM chunks (as
    counts of whole blocks before the longest context's last token), and whether some
    context ends on each side of the first boundary of each (a block's last key, the next
    block's first)."""
    longest, ends = max(lengths), set(lengths)
    return {"key_block": block, "longest_context": longest, "key_blocks_crossed": (longest - 1) // block,
            "either_side_of_a_key_block": {block, block + 1} <= ends,
            "ssm_chunk": chunk, "ssm_chunks_crossed": (longest - 1) // chunk,
            "either_side_of_an_ssm_chunk": {chunk, chunk + 1} <= ends}


def check_crossed(gate, contexts, boundaries: dict) -> None:
    """The condition that some context of `contexts` tokens crossed the key block, and the
    SSM chunk where `boundaries` names one ({key_block, ssm_chunk or None}); else vacuous."""
    block, chunk = boundaries["key_block"], boundaries["ssm_chunk"]
    crossed = coverage(contexts, block, chunk or block)
    gate.check(f"contexts crossed a key block ({block} keys){f' and an SSM chunk ({chunk} tokens)' if chunk else ''}",
               crossed["key_blocks_crossed"] > 0 and (chunk is None or crossed["ssm_chunks_crossed"] > 0),
               coverage=crossed)
