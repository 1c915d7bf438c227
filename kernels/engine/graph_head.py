"""The head of a decode graph (kernels/engine/graphs.py): lm_head, the draw and the log-prob.

Captured after the forward, so a replay waits on nothing until its tokens are collected. The draw
is the sampler's tensor form (`variant.draw`), its eager arithmetic after truncation, given the raw
logits and the temperatures (it scales them with the bits of logprob.forms.scaled): an untruncated
row gets the eager bits (gate C5). The draw and the log-prob each read the logits as they come, so
no scaled [B, V] copy is written. Top-k / top-p rows are drawn again from the captured logits;
full log-prob rows and untensored samplers go eager.
"""
import torch

from kernels.engine.pinned import StagingSets
from kernels.ops.sampler.forms import row_tensors, truncates
from kernels.ops.transfer import to_device


def tensor_draw(dispatch, case: str):
    """The contract's sampler variant's tensor form for `case`, or None."""
    bound = dispatch.contract.op("sampler", case)
    return getattr(getattr(bound, "func", bound), "draw", None)


class GraphHead:
    """Static sampler inputs, filled through pinned staging sets."""

    def __init__(self, max_batch: int, device):
        self.temperatures = torch.ones(max_batch, dtype=torch.float32, device=device)
        self.greedy = torch.zeros(max_batch, dtype=torch.bool, device=device)
        self.keys = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._staging = StagingSets(temperatures=(max_batch, torch.float32, 1.0), greedy=(max_batch, torch.bool, 0),
                                    keys=(max_batch, torch.int64, 0))

    def capture(self, model, dispatch, case: str, hidden, draw):
        """Inside a capture: (tokens [B] long, log-probs [B] fp32, logits [B, V]) of the rows
        of `hidden`."""
        size = hidden.shape[0]
        temperatures = self.temperatures[:size]
        logits = model.logits(hidden, dispatch, case)
        tokens = draw(logits, self.greedy[:size], self.keys[:size], temperatures)
        return tokens, dispatch("logprob", case, None, logits, tokens, temperatures), logits

    def redraw_truncated(self, dispatch, case: str, captured, params_list, draw_indices):
        """(tokens, log-probs) of the step's rows, the rows that truncate drawn again by the
        eager sampler on their captured logits (device ops; the others as captured)."""
        tokens, logprobs, logits = captured
        count = len(params_list)
        rows = [i for i, p in enumerate(params_list) if truncates([p])]
        if not rows:
            return tokens[:count], logprobs[:count]
        index = to_device(torch.tensor(rows), logits.device)  # no wait for the replay
        chosen = logits[index]
        drawn = dispatch("sampler", case, None, chosen, [params_list[i] for i in rows], [draw_indices[i] for i in rows])
        tokens, logprobs = tokens[:count].clone(), logprobs[:count].clone()
        tokens[index] = drawn
        logprobs[index] = dispatch("logprob", case, None, chosen, drawn, self.temperatures[index])
        return tokens, logprobs

    def fill(self, params_list, draw_indices, size: int) -> None:
        """Copy the rows' sampler inputs in (pinned, asynchronous); padding rows draw greedily."""
        count, staging = len(params_list), self._staging.next()
        rows = row_tensors(params_list, draw_indices, "cpu")  # the eager sampler's own
        for name, real, pad in zip(("temperatures", "greedy", "keys"), rows, (1.0, True, 0)):
            host = staging[name]
            host[:count], host[count:size] = real, pad
            getattr(self, name)[:size].copy_(host[:size], non_blocking=True)
