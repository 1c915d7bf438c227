"""How the report writes a recorded value: short text for a table cell (format_value) and a
nested record as dotted rows (flatten). The full value stays in the linked raw file."""
import json

MAX_FIGURE_CHARS = 160
MAX_LIST_CHARS = 90


def format_value(value) -> str:
    """One figure as short text: floats to 6 significant digits, long lists summarised,
    SHA-256 digests cut to 12 hex digits (the full value is in the linked file)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"
    if isinstance(value, list):
        if any(isinstance(v, (list, dict)) for v in value):
            text = f"{len(value)} items"
        elif len(value) > 6 and all(isinstance(v, float) for v in value):
            text = f"{len(value)} values, max {format_value(max(value))}"
        else:
            text = "[" + ", ".join(format_value(v) for v in value) + "]"
            text = text if len(text) <= MAX_LIST_CHARS else f"{text[:MAX_LIST_CHARS]}… ({len(value)} items)"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    else:
        text = str(value)
    return text if len(text) <= MAX_FIGURE_CHARS else text[:MAX_FIGURE_CHARS - 1] + "…"


def flatten(document: dict, prefix: str = "") -> list:
    """[(dotted key, formatted value)] with nested dicts spelled out one key per row."""
    rows = []
    for key, value in document.items():
        if isinstance(value, dict) and value:
            rows.extend(flatten(value, f"{prefix}{key}."))
        else:
            rows.append((f"{prefix}{key}", format_value(value)))
    return rows


def ratio_with_noise(ratio, noise) -> str:
    """A ratio and, where recorded as [low, high], its noise interval: "0.82 [0.77, 0.86]"."""
    if isinstance(noise, list) and len(noise) == 2:
        return f"{format_value(ratio)} [{format_value(noise[0])}, {format_value(noise[1])}]"
    return format_value(ratio)
