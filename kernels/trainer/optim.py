"""Mixed-precision AdamW: fp32 master weights, the model keeps the activation dtype.

The model's parameters (what both runtimes compute with) are the master weights rounded to
the model dtype after every step; gradients arrive in the model dtype and are upcast. AdamW
runs with foreach=False: one plain loop, the same arithmetic on every run. With the state on
the host, each parameter's master and moments visit the model's device for its own update and
go back: the same kernels on the same values, so the same bits, with 12 bytes a parameter off it.
"""
import torch

MOMENTS = ("exp_avg", "exp_avg_sq")


class MixedPrecisionAdamW:
    """AdamW over fp32 master copies of the model's parameters, kept on the model's device or,
    with state_on_host, in (pinned) host memory."""

    def __init__(self, model, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, state_on_host=False):
        self.model = model
        self.names = [name for name, _ in model.named_parameters()]
        self.state_on_host = state_on_host
        self.master = {name: self._kept(p.detach().float()).requires_grad_(True)
                       for name, p in model.named_parameters()}
        self.optimizer = torch.optim.AdamW(list(self.master.values()), lr=lr, betas=betas, eps=eps,
                                           weight_decay=weight_decay, foreach=False)

    def _kept(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy where the state lives: the tensor's device, or pinned host memory."""
        if not self.state_on_host:
            return tensor.clone()
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=torch.cuda.is_available())
        return host.copy_(tensor)

    def step(self) -> None:
        params = dict(self.model.named_parameters())
        if self.state_on_host:
            for name in self.names:  # one parameter at a time on the device: AdamW's loop, split
                self._step_on_device(name, params[name])
        else:
            for name in self.names:
                grad = params[name].grad
                self.master[name].grad = None if grad is None else grad.float()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                for name in self.names:
                    params[name].copy_(self.master[name])
        for name in self.names:
            params[name].grad = None

    def _step_on_device(self, name: str, param: torch.Tensor) -> None:
        """AdamW on one parameter: its master and moments brought to the parameter's device,
        updated there alone (the others hold no gradient), written back to the host."""
        if param.grad is None:
            return
        master, state = self.master[name], self.optimizer.state[self.master[name]]
        host = {"master": master.data, **{key: state[key] for key in MOMENTS if key in state}}
        master.data = host["master"].to(param.device, non_blocking=True)
        for key in MOMENTS:
            if key in state:
                state[key] = host[key].to(param.device, non_blocking=True)
        master.grad = param.grad.float()
        self.optimizer.step()
        master.grad = None
        with torch.no_grad():
            param.copy_(master)
        for key in MOMENTS:  # the first step made them on the device
            state[key] = host[key].copy_(state[key]) if key in host else self._kept(state[key])
        master.data = host["master"].copy_(master.data)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
