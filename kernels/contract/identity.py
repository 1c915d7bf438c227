"""SHA-256 identities both runtimes compute; C0 requires them equal.

- semantic: the model config and every weight's name, dtype, shape and bytes;
- numerical_policy: the resolved contract (every region x case -> implementation and exact
  constants) and the source of every op family it uses;
- deployment: what executes it (torch, triton, CUDA, device, CPU capability, threads,
  communication backend).
"""
import dataclasses
import hashlib
import json
import platform

import torch

from kernels.contract.constants import encode_float
from kernels.ops import registry


def _digest(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def semantic_identity(config, state_dict) -> str:
    digest = hashlib.sha256(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().contiguous().cpu()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _exact(value):
    return encode_float(value, "f64") if isinstance(value, float) else value


def numerical_policy_identity(contract) -> str:
    resolved = {f"{region}|{case}": [b.impl, [[k, _exact(v)] for k, v in b.constants]]
                for (region, case), b in contract.bindings.items()}
    families = sorted({b.impl.partition(".")[0] for b in contract.bindings.values()})
    sources = {family: registry.family_source(family) for family in families}
    return _digest({"resolved": resolved, "sources": sources})


def deployment_fingerprint(comm_backend: str = "none") -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "num_threads": torch.get_num_threads(),
        "comm_backend": comm_backend,
        "python": platform.python_version(),
    }


def deployment_identity(comm_backend: str = "none") -> str:
    return _digest(deployment_fingerprint(comm_backend))


def identities(config, state_dict, contract, comm_backend: str = "none") -> dict:
    return {"semantic": semantic_identity(config, state_dict),
            "numerical_policy": numerical_policy_identity(contract),
            "deployment": deployment_identity(comm_backend)}
