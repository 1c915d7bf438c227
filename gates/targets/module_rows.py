"""Every module's output rows of a torch model, by token position, through forward hooks: what
locate compares on a target whose two sides run the same module tree (transformers' generate
with its KV cache and its full forward). A call whose output's sequence dim has S rows covers
the S positions after those already seen (a prefill, then one per decode step); a module's row
at a position is its output there, copied to the CPU as it came.
"""
import torch

from gates.compare import bit_view, first_bit_difference


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return next((t for t in output if isinstance(t, torch.Tensor)), None)
    return getattr(output, "last_hidden_state", getattr(output, "logits", None))


class ModuleRows:
    """Hooks on every named submodule of `model`: rows[name][position] = its output row.
    Rows are taken from batch entry 0 (one sequence per call) along dim 1."""

    def __init__(self, model):
        self.rows: dict = {}
        self.order: list = []
        self._start = 0
        self._length = None
        self._handles = [model.register_forward_pre_hook(self._new_call, with_kwargs=True)]
        self._handles += [module.register_forward_hook(self._hook(name))
                          for name, module in model.named_modules() if name]

    def _new_call(self, module, args, kwargs):
        """The model's own call: its input's length says how many positions this call adds."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._start += self._length or 0
        self._length = ids.shape[1]

    def _hook(self, name):
        def keep(module, inputs, output):
            tensor = _first_tensor(output)
            if tensor is None or tensor.dim() < 3 or tensor.shape[1] != self._length:
                return
            if name not in self.rows:
                self.rows[name] = {}
                self.order.append(name)
            for offset in range(self._length):
                self.rows[name][self._start + offset] = tensor[0, offset].detach().to("cpu", copy=True)
        return keep

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def first_divergent_module(engine: ModuleRows, trainer: ModuleRows, positions: int) -> tuple:
    """(first divergence or None, module rows compared): the earliest position < `positions` at
    which a module's engine and trainer rows differ in bits, the first such module in the
    trainer's execution order there; the element and both values of its first difference."""
    compared = 0
    for position in range(positions):
        for name in trainer.order:
            left, right = engine.rows.get(name, {}).get(position), trainer.rows[name].get(position)
            if left is None or right is None:
                continue
            compared += 1
            if left.shape != right.shape or not torch.equal(bit_view(left), bit_view(right)):
                return _difference(name, position, left, right), compared
    return None, compared


def _difference(name: str, position: int, left: torch.Tensor, right: torch.Tensor) -> dict:
    """Where two rows first differ (gates/compare.py): the element (0 when their shapes differ),
    both values and the ulps between them."""
    found = first_bit_difference(left.flatten(), right.flatten()) if left.shape == right.shape else None
    element = found.index[0] if found else 0
    return {"module": name, "position": position, "element": element, "engine_value": float(left.flatten()[element]),
            "trainer_value": float(right.flatten()[element]), "ulps": found.ulps if found else None,
            "dtype": str(left.dtype).replace("torch.", "")}
