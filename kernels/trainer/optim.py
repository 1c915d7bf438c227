"""Mixed-precision AdamW: fp32 master weights, the model keeps the activation dtype.

The model's parameters (what both runtimes compute with) are the master weights rounded to
the model dtype after every step; gradients arrive in the model dtype and are upcast. AdamW
runs with foreach=False: one plain loop, the same arithmetic on every run.
"""
import torch


class MixedPrecisionAdamW:
    """AdamW over fp32 master copies of the model's parameters."""

    def __init__(self, model, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.model = model
        self.names = [name for name, _ in model.named_parameters()]
        self.master = {name: p.detach().float().clone().requires_grad_(True)
                       for name, p in model.named_parameters()}
        self.optimizer = torch.optim.AdamW(list(self.master.values()), lr=lr, betas=betas, eps=eps,
                                           weight_decay=weight_decay, foreach=False)

    def step(self) -> None:
        params = dict(self.model.named_parameters())
        for name in self.names:
            grad = params[name].grad
            self.master[name].grad = None if grad is None else grad.float()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name in self.names:
                params[name].copy_(self.master[name])
                params[name].grad = None

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
