"""The trainer: scoring in case trainer_fwd, and one GRPO update per step in case trainer_bwd.

Its model is built from the engine's definition; an update runs a micro-batch at a time
(micro_batch.py). Gradients add in a fixed order: micro-batches fold in fp32 into `gradient_leaves`
leaves summed by the pairwise tree (gradient_leaves.py), so replicas owning whole leaves reduce one
process's bits (data_parallel.py); lm_head's gradient adds `head_fold_rows` tiles in order
(chunked_head.py), so head_chunk_rows and layer recompute move no bit. Backward is autograd, with
torch.autograd.Function rules for the CUDA kernels, the chunked head and quant.py's STE.
"""
import torch

from kernels.contract.dispatch import make_dispatch
from kernels.contract.identity import identities
from kernels.layout.groups import comm_fingerprint
from kernels.layout.tree import StreamingTreeSum
from kernels.models.registry import build_model
from kernels.trainer import data_parallel
from kernels.trainer.chunked_head import FOLD_ROWS, check_chunking
from kernels.trainer.gradient_leaves import folded_leaf, leaf_groups
from kernels.trainer.logprobs import sequence_logprobs
from kernels.trainer.optim import MixedPrecisionAdamW

GRADIENT_LEAVES = 4  # leaves of every update (kernels/trainer/gradient_leaves.py): DP degrees 1, 2, 4


class Trainer:
    """Scores completions and applies GRPO updates; `weights()` is what syncs to the engine."""

    def __init__(self, config, contract, *, seed=0, weights=None, lr=1e-3, weight_decay=0.0,
                 micro_batch_size=8, layout="packed", observers=(), device="cpu", parallel=None,
                 head_chunk_rows=None, head_fold_rows=FOLD_ROWS, gradient_leaves=GRADIENT_LEAVES,
                 recompute_layers=False, optimizer_on_host=False):
        """Seeded random weights, or a copy of `weights` (a state dict) when given; the model
        lives on `device`, its fp32 master weights and the optimizer state there too or, with
        optimizer_on_host, in host memory (the same bits: kernels/trainer/optim.py)."""
        contract.require_regions(config.REGIONS)
        self.config = config
        self.model = build_model(config, seed if weights is None else None).to(device)
        if weights is not None:
            self.model.load_state_dict(weights, strict=True)
        self.parallel, self.comm = parallel, comm_fingerprint(parallel)  # LayoutGroups (kernels/layout/) or None
        self.dispatch = make_dispatch(contract, observers, parallel, config=config, side="trainer")
        self.optimizer = MixedPrecisionAdamW(self.model, lr=lr, weight_decay=weight_decay,
                                             state_on_host=optimizer_on_host)
        self.micro_batch_size = micro_batch_size
        self.layout = layout
        check_chunking(head_chunk_rows, head_fold_rows)
        self.head_chunk_rows, self.head_fold_rows = head_chunk_rows, head_fold_rows
        leaf_groups(0, 1, gradient_leaves)  # a bad count fails here, not at the first step
        self.gradient_leaves = gradient_leaves
        self.model.recompute_layers = recompute_layers  # per-layer activation recompute: the same bits
        self.gradient_bytes_peak = 0  # fp32 gradient bytes the last update held at once (its books)

    def score(self, sequences, *, micro_batch_size=None, layout=None):
        """Per-token log-probs of each sequence's completion (no gradient)."""
        with torch.no_grad():
            if self.parallel is not None:
                return data_parallel.score(self, sequences, micro_batch_size or self.micro_batch_size,
                                           layout or self.layout)
            return sequence_logprobs(self.model, self.dispatch, sequences, "trainer_fwd",
                                     micro_batch_size=micro_batch_size or self.micro_batch_size,
                                     layout=layout or self.layout)

    def train_step(self, sequences, advantages, old_logprobs) -> dict:
        """One optimizer update; returns the loss and the log-probs the update saw (in a
        layout, also the reduced gradients)."""
        if self.parallel is not None:
            return data_parallel.train_step(self, sequences, advantages, old_logprobs)
        if not len(sequences) == len(old_logprobs) == len(advantages):
            raise ValueError(f"{len(sequences)} sequences, {len(old_logprobs)} old log-probs, "
                             f"{len(advantages)} advantages")
        params = dict(self.model.named_parameters())
        gradients, loss, logprobs = {name: StreamingTreeSum() for name in params}, StreamingTreeSum(), []
        self.gradient_bytes_peak = 0
        for batches in leaf_groups(len(sequences), self.micro_batch_size, self.gradient_leaves):
            if not batches:
                continue
            scored, leaf_loss, leaf_grads = folded_leaf(self, sequences, advantages, old_logprobs, batches)
            logprobs.extend(lp for _, lp in scored)
            held = sum(t.numel() * t.element_size() for tree in gradients.values() for t in tree.held())
            self.gradient_bytes_peak = max(self.gradient_bytes_peak,
                                           held + sum(g.numel() * g.element_size() for g in leaf_grads.values()))
            loss.add(leaf_loss)
            for name, grad in leaf_grads.items():
                gradients[name].add(grad)
        for name, param in params.items():
            param.grad = gradients[name].total().to(param.dtype)
            gradients[name] = None  # its partials, freed as the parameter's gradient is made
        self.optimizer.step()
        return {"loss": float(loss.total()), "logprobs": logprobs}

    def identities(self) -> dict:
        """semantic / numerical_policy / deployment digests (C0 compares them with the engine's)."""
        return identities(self.config, self.model.state_dict(), self.dispatch.contract, **self.comm)

    def weights(self) -> dict:
        """What weight sync sends to the engine."""
        return {name: tensor.detach() for name, tensor in self.model.state_dict().items()}

    def load_state(self, model_state, master_state, optimizer_state) -> None:
        """Restore weights, fp32 master weights and optimizer state (names and shapes checked)."""
        self.model.load_state_dict(model_state, strict=True)
        if set(master_state) != set(self.optimizer.master):
            raise ValueError(f"master weights: names differ: {sorted(set(master_state) ^ set(self.optimizer.master))}")
        with torch.no_grad():
            for name, master in self.optimizer.master.items():
                if master_state[name].shape != master.shape:
                    raise ValueError(f"master weight {name}: shape {tuple(master_state[name].shape)}")
                master.copy_(master_state[name])
        self.optimizer.load_state_dict(optimizer_state)
