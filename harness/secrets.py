"""Keeping the harness's secrets out of what it starts and what it writes. Judge processes
and agents' shell commands get an allow-listed environment (a variable not named here does
not reach them, whatever a future credential is called). Transcripts, the run's agent
records and the reports pass through `redact`, which replaces the value of every
secret-looking variable of the harness's own environment, and Anthropic-style keys, before
a line is written. What an agent writes itself (its commits, its files) is checked with
`holds_secret` by the tamper scan.
"""
import os
import re

ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ",
           "VIRTUAL_ENV", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
           "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH",
           "NCCL_NVLS_ENABLE", "CI"}
ALLOWED_PREFIXES = ("LC_", "BITWISE_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "NVIDIA_")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)
KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")


def allowed_environment(base=None, **extra) -> dict:
    """The allow-listed part of `base` (default os.environ), with `extra` on top; a variable
    whose name looks secret is dropped even under an allowed prefix."""
    base = os.environ if base is None else base
    kept = {name: value for name, value in base.items()
            if (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not SECRET_NAME.search(name)}
    return {**kept, **extra}


def secret_values(base=None) -> list:
    """The values of the environment's secret-looking variables (8 characters or more)."""
    base = os.environ if base is None else base
    return sorted({v for k, v in base.items() if SECRET_NAME.search(k) and len(v) >= 8}, key=len, reverse=True)


def redact(text: str, base=None) -> str:
    """`text` with every secret value of the environment and every Anthropic-style key
    replaced by [redacted]."""
    for value in secret_values(base):
        text = text.replace(value, "[redacted]")
    return KEY_PATTERN.sub("[redacted]", text)


def holds_secret(text: str, base=None) -> bool:
    """Whether `text` holds a secret value of the environment or an Anthropic-style key."""
    return any(value in text for value in secret_values(base)) or bool(KEY_PATTERN.search(text))
