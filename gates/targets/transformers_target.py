"""transformers as a target: `generate` with its KV cache (prompts left-padded in batches,
sampling at temperature 1 from a seeded generator) is the engine side, a full forward of each
sequence alone the trainer side; both log-probs are fp32 log_softmax of the raw logits at the
sampled token. It offers no contract and no region doors; locate compares its modules' rows
on both sides (first_divergent_module).
"""
import torch

from gates.target import TARGET_OFFERS, Sample, import_stack, require_checkpoint
from gates.targets.module_rows import ModuleRows, first_divergent_module
from gates.workload import make_requests


def _transformers():
    return import_stack("transformers", "transformers", "pip install -e '.[transformers]'")


class TransformersTarget:
    name = "transformers"
    offers = TARGET_OFFERS["transformers"]

    def __init__(self, checkpoint, *, batch_size: int = 8, dtype=torch.float32):
        require_checkpoint(checkpoint, self.name)
        self.model = _transformers().AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).eval()
        self.vocab_size = self.model.config.vocab_size
        self.batch_size = batch_size

    def generate(self, workload) -> list:
        requests = make_requests(workload, self.vocab_size)
        samples = []
        for first in range(0, len(requests), self.batch_size):
            batch = requests[first:first + self.batch_size]
            samples += self._generate_batch([r.prompt for r in batch], workload.new_tokens,
                                            seed=workload.seed * 1_000_003 + first)
        return samples

    def generate_prompts(self, prompts: list, new_tokens: int) -> list:
        return self._generate_batch(prompts, new_tokens, seed=0, greedy=True)

    def _generate_batch(self, prompts: list, new_tokens: int, seed: int, greedy: bool = False) -> list:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([(0,) * (width - len(p)) + tuple(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        torch.manual_seed(seed)
        with torch.no_grad():
            sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0,
                                                            "top_p": 1.0}
            out = self.model.generate(input_ids=ids, attention_mask=mask, **sampling, max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, pad_token_id=0, output_logits=True,
                                      return_dict_in_generate=True)
        tokens = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()  # [B, new, V], before any sampling processor
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None])[..., 0]
        return [Sample(tuple(p), tuple(t.tolist()), lp.clone()) for p, t, lp in zip(prompts, tokens, logprobs)]

    def first_divergent_module(self, prompt: tuple, new_tokens: int) -> dict:
        """locate on this target: `prompt` decoded greedily by generate (KV cache) and the prompt
        with those tokens run through one forward, every module's rows compared by position
        (gates/targets/module_rows.py): {tokens, rows_compared, divergence or None}."""
        engine = ModuleRows(self.model)
        try:
            sample = self._generate_batch([prompt], new_tokens, seed=0, greedy=True)[0]
        finally:
            engine.close()
        trainer = ModuleRows(self.model)
        try:
            with torch.no_grad():
                self.model(input_ids=torch.tensor([sample.prompt + sample.tokens]))
        finally:
            trainer.close()
        found, compared = first_divergent_module(engine, trainer, len(prompt) + new_tokens - 1)
        return {"tokens": list(sample.tokens), "rows_compared": compared, "divergence": found}

    def score(self, samples: list) -> list:
        scored = []
        for sample in samples:
            ids = torch.tensor([sample.prompt + sample.tokens])
            with torch.no_grad():
                logits = self.model(input_ids=ids).logits[0, len(sample.prompt) - 1:-1].float()
            logprobs = torch.log_softmax(logits / sample.temperature, dim=-1)
            scored.append(logprobs.gather(-1, torch.tensor(sample.tokens)[:, None])[:, 0])
        return scored
