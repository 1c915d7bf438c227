"""The trainer's update holds one micro-batch's graph at a time: what autograd keeps for
backward peaks at the same size whether a step has 2 micro-batches or 6, where one backward
over the whole step (the negative control) grows with them; its fp32 gradient memory is flat
in the micro-batch count (fixed leaves), where a leaf per micro-batch (the negative control)
grows; and the leaves fold in order and add in tree_sum's order, so one process reduces the
bits data-parallel replicas do."""
import random

import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.contract import load_contract
from kernels.layout.tree import StreamingTreeSum, tree_sum
from kernels.models.config import load_model_config
from kernels.trainer.gradient_leaves import leaf_groups
from kernels.trainer.grpo import policy_loss
from kernels.trainer.logprobs import ScoredSequence, sequence_logprobs
from kernels.trainer.micro_batch import leaf
from kernels.trainer.trainer import Trainer

CONFIG = load_model_config("qwen3-cut")
MICRO_BATCH = 2


class SavedBytes:
    """saved_tensors_hooks that count the bytes autograd holds for backward, live and at peak."""

    def __init__(self):
        self.live = self.peak = 0

    def pack(self, tensor):
        size = tensor.numel() * tensor.element_size()
        self.live += size
        self.peak = max(self.peak, self.live)
        return _Held(tensor, size, self)

    @staticmethod
    def unpack(held):
        return held.tensor


class _Held:
    def __init__(self, tensor, size, counter):
        self.tensor, self.size, self.counter = tensor, size, counter

    def __del__(self):
        self.counter.live -= self.size


def _step_inputs(seed: int, num_sequences: int):
    rng = random.Random(seed)
    sequences = [ScoredSequence(tuple(rng.randrange(1, CONFIG.vocab_size) for _ in range(12)),
                                tuple(rng.randrange(1, CONFIG.vocab_size) for _ in range(20)))
                 for _ in range(num_sequences)]
    advantages = [rng.uniform(-1, 1) for _ in sequences]
    return sequences, advantages


def _peak_saved(step) -> int:
    counter = SavedBytes()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        step()
    return counter.peak


def test_an_update_holds_one_micro_batch_graph_at_a_time(fresh_seed):
    peaks, whole = {}, {}
    for batches in (2, 6):
        trainer = Trainer(CONFIG, load_contract("consistent"), seed=fresh_seed % 1000, micro_batch_size=MICRO_BATCH)
        sequences, advantages = _step_inputs(fresh_seed, batches * MICRO_BATCH)
        old = trainer.score(sequences)
        peaks[batches] = _peak_saved(lambda: trainer.train_step(sequences, advantages, old))

        def one_backward():  # the negative control: every micro-batch's graph kept for one backward
            logprobs = sequence_logprobs(trainer.model, trainer.dispatch, sequences, "trainer_bwd",
                                         micro_batch_size=MICRO_BATCH)
            policy_loss(logprobs, old, advantages).backward()
        whole[batches] = _peak_saved(one_backward)
    print(f"peak bytes saved for backward, 2 / 6 micro-batches: per micro-batch {peaks[2]} / {peaks[6]}, "
          f"one backward {whole[2]} / {whole[6]}")
    assert peaks[2] > 0 and peaks[6] == peaks[2]
    assert whole[6] > 2.5 * whole[2]  # the measure sees a graph kept per micro-batch


@pytest.mark.parametrize("count", range(1, 20))
def test_the_streaming_tree_adds_as_tree_sum(count, fresh_seed):
    parts = list(torch.randn(count, 257, generator=torch.Generator().manual_seed(fresh_seed)) * 1e3)
    streaming = StreamingTreeSum()
    for part in parts:
        streaming.add(part.clone())  # the tree owns (and adds into) what it is given
    assert_bitwise_equal(streaming.total(), tree_sum(parts), f"{count} parts")
    assert count < 4 or not torch.equal(streaming.total(), sum(parts))  # from 4 parts on, not a left fold


@pytest.mark.parametrize("num_leaves, leaf_sizes", [(2, [2, 1]), (4, [1, 1, 1, 0]), (1, [3])])
def test_the_update_folds_each_leaf_then_adds_the_leaves_in_tree_order(num_leaves, leaf_sizes, fresh_seed):
    """5 sequences at micro-batch 2 are 3 micro-batches, cut into num_leaves leaves; the
    reference writes the fold (left to right, fp32) and the tree (tree_sum) out."""
    sequences, advantages = _step_inputs(fresh_seed, 5)
    trainers = [Trainer(CONFIG, load_contract("consistent"), seed=fresh_seed % 1000, micro_batch_size=MICRO_BATCH,
                        gradient_leaves=num_leaves) for _ in range(2)]
    old = trainers[0].score(sequences)
    groups = leaf_groups(len(sequences), MICRO_BATCH, num_leaves)
    assert [len(batches) for batches in groups] == leaf_sizes
    folds = []
    for batches in [b for b in groups if b]:
        grads = [leaf(trainers[1], sequences, advantages, old, indices)[2] for indices in batches]
        folds.append({name: _left_fold([g[name].float() for g in grads]) for name in grads[0]})
    params, reduced = dict(trainers[0].model.named_parameters()), {}
    trainers[0].optimizer.step = lambda: reduced.update({n: p.grad.clone() for n, p in params.items()})
    trainers[0].train_step(sequences, advantages, old)
    assert set(reduced) == set(params)
    for name, param in params.items():
        assert_bitwise_equal(reduced[name], tree_sum([fold[name] for fold in folds]).to(param.dtype), name)


def _left_fold(parts):
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def test_the_updates_gradient_memory_is_flat_in_the_micro_batch_count(fresh_seed):
    """Fixed leaves: the fp32 gradient bytes an update holds at once (the trainer's books) are
    the same for 2, 6 and 12 micro-batches; a leaf per micro-batch (the negative control, the
    tree over micro-batches) holds one more partial sum per doubling."""
    peaks = {}
    for leaves in ("fixed", "per micro-batch"):
        for batches in (2, 6, 12):
            trainer = Trainer(CONFIG, load_contract("consistent"), seed=fresh_seed % 1000, micro_batch_size=1,
                              gradient_leaves=2 if leaves == "fixed" else batches)
            sequences, advantages = _step_inputs(fresh_seed, batches)
            trainer.train_step(sequences, advantages, trainer.score(sequences))
            peaks[leaves, batches] = trainer.gradient_bytes_peak
    print("peak fp32 gradient bytes held:", peaks)
    assert peaks["fixed", 2] > 0 and peaks["fixed", 2] == peaks["fixed", 6] == peaks["fixed", 12]
    assert peaks["per micro-batch", 12] >= 2 * peaks["per micro-batch", 2]


def test_a_bad_leaf_count_is_a_clear_error():
    with pytest.raises(ValueError, match="gradient_leaves: must be at least 1"):
        Trainer(CONFIG, load_contract("consistent"), gradient_leaves=0)


def leaf_inputs(config, seed, micro_batch=4, **options):
    """(trainer, 4 sequences, advantages, old log-probs) under the consistent contract, the
    trainer built with `options`: one micro-batch's update, ready for leaf()."""
    trainer = Trainer(config, load_contract("consistent"), seed=seed % 1000, micro_batch_size=micro_batch, **options)
    rng = random.Random(seed)
    sequences = [ScoredSequence(tuple(rng.randrange(1, config.vocab_size) for _ in range(rng.randint(5, 12))),
                                tuple(rng.randrange(1, config.vocab_size) for _ in range(rng.randint(15, 30))))
                 for _ in range(4)]
    advantages = [rng.uniform(-1, 1) for _ in sequences]
    return trainer, sequences, advantages, trainer.score(sequences)


def _leaf_gradients(config, seed, **head):
    """One micro-batch's gradients (leaf) under the consistent contract, head options `head`."""
    trainer, sequences, advantages, old = leaf_inputs(config, seed, **head)
    return leaf(trainer, sequences, advantages, old, list(range(4)))[2]


@pytest.mark.parametrize("model", ["qwen3-cut", "nemotron-cut"])  # tied and untied lm_head
def test_the_heads_gradient_bits_do_not_follow_the_chunk_size(model, fresh_seed):
    """The chunked head adds dW's fold tiles in one order for any chunk size that is a
    multiple of the fold: every gradient's bits are those of one chunk of every row. A
    different fold adds in another order and moves them (the measure sees an order change)."""
    config = load_model_config(model)
    whole = _leaf_gradients(config, fresh_seed, head_fold_rows=8)
    for chunk in (8, 16, 24):
        chunked = _leaf_gradients(config, fresh_seed, head_fold_rows=8, head_chunk_rows=chunk)
        for name, grad in whole.items():
            assert_bitwise_equal(chunked[name], grad, f"{model} {name}, chunks of {chunk}")
    refolded = _leaf_gradients(config, fresh_seed, head_fold_rows=32)
    head = "embed_tokens" if config.tie_word_embeddings else "lm_head"
    assert not torch.equal(refolded[head], whole[head]), "a fold of 32 rows added as one of 8"


def test_the_chunked_head_keeps_no_logits_for_backward(fresh_seed):
    """What autograd saves for the update holds no [tokens, V] logits: it is smaller than the
    unchunked head's (lm_head and log-prob under autograd) by at least their bf16 bytes."""
    trainer = Trainer(CONFIG, load_contract("consistent"), seed=fresh_seed % 1000, micro_batch_size=4,
                      head_chunk_rows=64)
    sequences, advantages = _step_inputs(fresh_seed, 4)
    old = trainer.score(sequences)
    chunked = _peak_saved(lambda: leaf(trainer, sequences, advantages, old, list(range(4))))

    def unchunked():  # the head as the door's regions under autograd, as before the chunked head
        import kernels.trainer.logprobs as logprobs
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(logprobs, "head_logprobs", _unchunked_head)
            leaf(trainer, sequences, advantages, old, list(range(4)))
    whole = _peak_saved(unchunked)
    tokens = sum(len(s.completion) for s in sequences)
    print(f"peak bytes saved for backward: chunked head {chunked}, unchunked {whole}, {tokens} scored tokens")
    assert whole - chunked >= tokens * CONFIG.vocab_size * 2


def _unchunked_head(hidden, weight, targets, temperatures, dispatch, case, rows, **_):
    with dispatch.selecting_rows(rows):
        logits = dispatch("lm_head", case, None, hidden, weight)
        return dispatch("logprob", case, None, logits, targets, temperatures)


def test_bad_head_chunking_is_a_clear_error():
    with pytest.raises(ValueError, match="multiple of head_fold_rows"):
        Trainer(CONFIG, load_contract("consistent"), head_chunk_rows=12, head_fold_rows=8)
    with pytest.raises(ValueError, match="head_fold_rows"):
        Trainer(CONFIG, load_contract("consistent"), head_fold_rows=0)
