"""Where a CPU benchmark leaves its raw samples: DIR/<name>-<time>.json, written before the
summary is trusted (the figures in RESULTS.md name these files)."""
import json
import time
from pathlib import Path


def write_raw(results: dict, out, name: str) -> Path:
    """Write `results` as DIR/<name>-<YYYYmmddTHHMMSS>.json and say where."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1))
    print("raw samples:", path)
    return path
