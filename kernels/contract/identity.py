"""SHA-256 identities both runtimes compute; C0 requires them equal.

semantic: the model config and every weight's name, dtype, shape and bytes. numerical_policy:
the resolved contract (region x case -> implementation, exact constants, layout arithmetic) and
the source text of everything that decides bits (POLICY_SOURCES). deployment: torch, Triton,
CUDA, device, CPU capability, threads, Python, communication backend and transport.
"""
import dataclasses
import hashlib
import json
import platform
from pathlib import Path

import torch

from kernels.contract.constants import encode_float


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


KERNELS_DIR = Path(__file__).resolve().parent.parent
POLICY_SOURCES = ("ops/**/*.py", "models/*.py", "layout/*.py", "contract/dispatch.py", "engine/engine.py",
                  "trainer/logprobs.py", "trainer/data_parallel.py")


def policy_source_files() -> list:
    """The files whose text is part of the numerical policy."""
    return sorted({p for pattern in POLICY_SOURCES for p in KERNELS_DIR.glob(pattern)})


def numerical_policy_identity(contract) -> str:
    resolved = {f"{region}|{case}": [b.impl, [[k, _exact(v)] for k, v in b.constants]]
                for (region, case), b in contract.bindings.items()}
    sources = {str(p.relative_to(KERNELS_DIR)): p.read_text() for p in policy_source_files()}
    layout = dataclasses.asdict(contract.layout) if contract.layout is not None else None
    return _digest({"resolved": resolved, "sources": sources, "layout": layout})


def deployment_fingerprint(comm_backend: str = "none", comm_transport: str = "none") -> dict:
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
        "comm_transport": comm_transport,
        "python": platform.python_version(),
    }


def deployment_identity(comm_backend: str = "none", comm_transport: str = "none") -> str:
    return _digest(deployment_fingerprint(comm_backend, comm_transport))


def identities(config, state_dict, contract, comm_backend: str = "none", comm_transport: str = "none") -> dict:
    return {"semantic": semantic_identity(config, state_dict),
            "numerical_policy": numerical_policy_identity(contract),
            "deployment": deployment_identity(comm_backend, comm_transport)}
