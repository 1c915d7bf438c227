"""vLLM as a target: its offline `LLM` (in this process, prefix caching off so a fresh prefill
computes every token, the model in fp32) generates with `logprobs=0`, the sampled token's fp32
log-prob of the raw logits, per-request seeds at temperature 1 or greedy; the trainer side is
transformers' full forward of the same checkpoint (gates/targets/transformers_target.py).
`vllm-batch-invariant` is the same with VLLM_BATCH_INVARIANT=1, vLLM's batch-invariant mode.
It offers no contract and no region doors. Install: `bash .ci/install_vllm .venv`.
"""
import json
import os
import tempfile
from pathlib import Path

import torch

from gates.target import TARGET_OFFERS, Sample, import_stack, require_checkpoint
from gates.workload import make_requests

ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_LOGGING_LEVEL": "WARNING"}
"""Set before vLLM is imported: the engine core in this process (a worker answers in one
process), a 1 GiB CPU KV cache, its log quiet."""


def _vllm(batch_invariant: bool):
    """The vllm module, imported under ENVIRONMENT and the batch-invariant switch; its caches
    (and torch inductor's, which compiles its sampler) where the judge's worker points them
    (gates/candidate.py), else under this process's temporary folder."""
    scratch = Path(tempfile.gettempdir())
    os.environ.update(ENVIRONMENT, VLLM_BATCH_INVARIANT="1" if batch_invariant else "0")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(scratch / "vllm-cache"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(scratch / "inductor"))
    return import_stack("vllm", "vllm", "its CPU build installs with bash .ci/install_vllm .venv")


class VllmTarget:
    name = "vllm"
    offers = TARGET_OFFERS["vllm"]
    batch_invariant = False

    def __init__(self, checkpoint):
        require_checkpoint(checkpoint, self.name)
        self.checkpoint = str(checkpoint)
        if not (Path(checkpoint) / "config.json").is_file():
            raise ValueError(f"--checkpoint {checkpoint}: no config.json (a transformers save_pretrained directory)")
        config = json.loads((Path(checkpoint) / "config.json").read_text())
        self.vocab_size = config.get("text_config", config)["vocab_size"]
        self._llm = self._trainer = None

    def _engine(self):
        """The LLM, built on the first generate (a trainer-side worker never builds one)."""
        if self._llm is None:
            vllm = _vllm(self.batch_invariant)
            self._llm = vllm.LLM(model=self.checkpoint, skip_tokenizer_init=True, dtype="float32",
                                 enforce_eager=True, enable_prefix_caching=False, seed=0)
            self._params = vllm.SamplingParams
        return self._llm

    def _run(self, prompts: list, new_tokens: int, seeds: list | None) -> list:
        llm = self._engine()
        params = [self._params(temperature=0.0 if seeds is None else 1.0, top_p=1.0, top_k=0, seed=None if seeds is None
                               else seed, max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True, logprobs=0,
                               detokenize=False) for seed in (seeds or [None] * len(prompts))]
        outputs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        samples = []
        for prompt, output in zip(prompts, outputs):
            completion = output.outputs[0]
            tokens = tuple(completion.token_ids)
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs, tokens)]
            samples.append(Sample(tuple(prompt), tokens, torch.tensor(logprobs, dtype=torch.float32)))
        return samples

    def generate(self, workload) -> list:
        requests = make_requests(workload, self.vocab_size)
        seeds = [workload.seed * 1_000_003 + index for index in range(len(requests))]
        return self._run([r.prompt for r in requests], workload.new_tokens, seeds)

    def generate_prompts(self, prompts: list, new_tokens: int) -> list:
        return self._run(prompts, new_tokens, None)

    def score(self, samples: list) -> list:
        if self._trainer is None:
            from gates.targets.transformers_target import TransformersTarget
            self._trainer = TransformersTarget(self.checkpoint)
        return self._trainer.score(samples)


class VllmBatchInvariantTarget(VllmTarget):
    name = "vllm-batch-invariant"
    offers = TARGET_OFFERS["vllm-batch-invariant"]
    batch_invariant = True
