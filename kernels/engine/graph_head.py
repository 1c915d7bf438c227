"""The head of a decode graph (kernels/engine/graphs.py): lm_head, the draw and the sampled
token's log-prob captured after the forward, so a replay ends in one copy and one wait.

The draw is the sampler variant's tensor form (`variant.draw`), the arithmetic its eager form
runs after truncation, so an untruncated row gets the eager bits (gate C5). Top-k / top-p rows
are drawn again from the captured logits; full log-prob rows and untensored samplers go eager.
"""
import torch

from kernels.engine.pinned import host_buffer
from kernels.ops.sampler import row_tensors, scaled, truncates


def tensor_draw(dispatch, case: str):
    """The contract's sampler variant's tensor form for `case`, or None."""
    bound = dispatch.contract.op("sampler", case)
    return getattr(getattr(bound, "func", bound), "draw", None)


class GraphHead:
    """Static sampler inputs and pinned host copies of what a replay samples."""

    def __init__(self, max_batch: int, device):
        self.temperatures = torch.ones(max_batch, dtype=torch.float32, device=device)
        self.greedy = torch.zeros(max_batch, dtype=torch.bool, device=device)
        self.keys = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._host_temperatures = host_buffer(max_batch, torch.float32, 1.0)
        self._host_greedy = host_buffer(max_batch, torch.bool)
        self._host_keys = host_buffer(max_batch, torch.int64)
        self._host_tokens = host_buffer(max_batch, torch.int64)
        self._host_logprobs = host_buffer(max_batch, torch.float32)

    def capture(self, model, dispatch, case: str, hidden, draw):
        """Inside a capture: (tokens [B] long, log-probs [B] fp32, logits [B, V]) of the rows
        of `hidden`."""
        size = hidden.shape[0]
        temperatures = self.temperatures[:size]
        logits = model.logits(hidden, dispatch, case)
        tokens = draw(scaled(logits, temperatures), self.greedy[:size], self.keys[:size])
        return tokens, dispatch("logprob", case, None, logits, tokens, temperatures), logits

    def redraw_truncated(self, dispatch, case: str, captured, params_list, draw_indices):
        """(tokens, log-probs) of the step's rows, the rows that truncate drawn again by the
        eager sampler on their captured logits (device ops; the others as captured)."""
        tokens, logprobs, logits = captured
        count = len(params_list)
        rows = [i for i, p in enumerate(params_list) if truncates([p])]
        if not rows:
            return tokens[:count], logprobs[:count]
        index = torch.tensor(rows, device=logits.device)
        chosen = logits[index]
        drawn = dispatch("sampler", case, None, chosen, [params_list[i] for i in rows], [draw_indices[i] for i in rows])
        tokens, logprobs = tokens[:count].clone(), logprobs[:count].clone()
        tokens[index] = drawn
        logprobs[index] = dispatch("logprob", case, None, chosen, drawn, self.temperatures[index])
        return tokens, logprobs

    def fill(self, params_list, draw_indices, size: int) -> None:
        """Copy the rows' sampler inputs in (pinned, asynchronous); padding rows draw greedily."""
        count = len(params_list)
        temperatures, greedy, keys = row_tensors(params_list, draw_indices, "cpu")  # the eager sampler's own
        self._host_temperatures[:count], self._host_greedy[:count], self._host_keys[:count] = temperatures, greedy, keys
        self._host_temperatures[count:size], self._host_greedy[count:size], self._host_keys[count:size] = 1.0, True, 0
        self.temperatures[:size].copy_(self._host_temperatures[:size], non_blocking=True)
        self.greedy[:size].copy_(self._host_greedy[:size], non_blocking=True)
        self.keys[:size].copy_(self._host_keys[:size], non_blocking=True)

    def results(self, tokens, logprobs) -> tuple[list, list]:
        """The rows' tokens and log-probs on the host: one copy each, one wait."""
        count = tokens.shape[0]
        self._host_tokens[:count].copy_(tokens[:count], non_blocking=True)
        self._host_logprobs[:count].copy_(logprobs[:count], non_blocking=True)
        if tokens.is_cuda:
            torch.cuda.current_stream().synchronize()
        return self._host_tokens[:count].tolist(), self._host_logprobs[:count].tolist()
