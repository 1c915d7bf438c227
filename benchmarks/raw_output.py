"""Where a benchmark leaves its raw samples: DIR/<name>-<time>.json, written before the
summary is trusted (the figures in RESULTS.md name these files), with the commit and the
environment they were measured on."""
import json
import subprocess
import time
from pathlib import Path


def provenance() -> dict:
    """The commit (HEAD of the working directory's repository, None outside one), whether
    kernels/ differs from it, and the deployment fingerprint (torch, Triton, CUDA, device) a
    measurement was taken on: every benchmark's one definition of where its figures come from."""
    from kernels.contract.identity import deployment_fingerprint
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "kernels"], capture_output=True, text=True).stdout
    return {"commit": commit or None, "dirty": bool(changed.strip()), "environment": deployment_fingerprint()}


def write_raw(results: dict, out, name: str) -> Path:
    """Write `results` as DIR/<name>-<YYYYmmddTHHMMSS>.json and say where."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1))
    print("raw samples:", path)
    return path
