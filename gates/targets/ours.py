"""Our kernels as a target: the engine (continuous batching, the contract's regions) generates,
the trainer scores, exactly as the gates have always run them (gates/workload.py)."""
from gates.target import TARGET_OFFERS, Sample
from gates.workload import EngineShape, Workload, make_engine, rollout, score_sequences
from kernels.engine.request import Request
from kernels.ops.sampler import SamplingParams
from kernels.trainer.logprobs import ScoredSequence


def _sample(completion) -> Sample:
    request = completion.request
    return Sample(request.prompt, tuple(completion.tokens), completion.logprob_tensor,
                  request.params.logprob_temperature)


class OurTarget:
    name = "ours"
    offers = TARGET_OFFERS["ours"]

    def __init__(self, config, contract, weights, shape: EngineShape = EngineShape(), micro_batch_size: int = 8):
        self.config, self.contract, self.weights = config, contract, weights
        self.shape, self.micro_batch_size = shape, micro_batch_size
        self.vocab_size = config.vocab_size

    def generate(self, workload) -> list:
        completions, _ = rollout(self.config, self.contract, self.weights, workload, self.shape)
        return [_sample(c) for c in completions]

    def score(self, samples: list) -> list:
        sequences = [ScoredSequence(s.prompt, s.tokens, s.temperature) for s in samples]
        return score_sequences(self.config, self.contract, self.weights, sequences,
                               micro_batch_size=self.micro_batch_size)

    def generate_prompts(self, prompts: list, new_tokens: int) -> list:
        shape = EngineShape(self.shape.tokens_per_step, max(self.shape.max_running, len(prompts)),
                            self.shape.block_size)
        workload = Workload(num_sequences=len(prompts), new_tokens=new_tokens,
                            min_prompt_len=min(map(len, prompts)), max_prompt_len=max(map(len, prompts)))
        engine = make_engine(self.config, self.contract, self.weights, workload, shape)
        requests = [Request(index, tuple(prompt), new_tokens, SamplingParams(0.0))
                    for index, prompt in enumerate(prompts)]
        return [_sample(c) for c in engine.generate(requests)]
