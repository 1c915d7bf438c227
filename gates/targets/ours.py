"""Our kernels as a target: the engine (continuous batching, the contract's regions) generates,
the trainer scores, exactly as the gates have always run them (gates/workload.py)."""
from gates.target import TARGET_OFFERS, Sample
from gates.workload import EngineShape, rollout, score_sequences
from kernels.trainer.logprobs import ScoredSequence


class OurTarget:
    name = "ours"
    offers = TARGET_OFFERS["ours"]

    def __init__(self, config, contract, weights, shape: EngineShape = EngineShape(), micro_batch_size: int = 8):
        self.config, self.contract, self.weights = config, contract, weights
        self.shape, self.micro_batch_size = shape, micro_batch_size
        self.vocab_size = config.vocab_size

    def generate(self, workload) -> list:
        completions, _ = rollout(self.config, self.contract, self.weights, workload, self.shape)
        return [Sample(c.request.prompt, tuple(c.tokens), c.logprob_tensor, c.request.params.logprob_temperature)
                for c in completions]

    def score(self, samples: list) -> list:
        sequences = [ScoredSequence(s.prompt, s.tokens, s.temperature) for s in samples]
        return score_sequences(self.config, self.contract, self.weights, sequences,
                               micro_batch_size=self.micro_batch_size)
