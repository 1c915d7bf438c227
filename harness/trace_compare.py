"""Two door traces (engine, trainer) of the same tokens -> the causally first divergent door.

Doors are ordered as the trainer's forward first calls them (embed, then layer by layer, each
layer's regions in program order, then the head): a layer's outputs depend only on earlier
doors of the same or lower layers at the same or earlier positions, so the first door (in
that order) where any shared token's row digest differs is where the bits split; everything
after it may only inherit the difference. Within that door the earliest position is named.
"""
import json
from pathlib import Path

from harness.trace import WHOLE_TENSOR_REGIONS


def read_trace(path: Path) -> tuple:
    """(door order, {door: {token: row facts}}, {door: whole digest of its first call})."""
    order, rows, whole = [], {}, {}
    with Path(path).open() as lines:
        for text in lines:
            line = json.loads(text)
            door = (line["layer"], line["region"], line["ordinal"])
            if door not in rows:
                order.append(door)
                rows[door] = {}
                whole[door] = (line["digest"], line["case"])
            for index, token in enumerate(line["tokens"] or ()):
                rows[door][tuple(token)] = {
                    "digest": line["rows"][index], "case": line["case"], "forward": line["forward"],
                    "row": index, "truncated": {k: v[index] for k, v in line.get("truncated", {}).items()}}
    return order, rows, whole


def agreeing_keep_bits(engine_row: dict, trainer_row: dict):
    """The most leading mantissa bits whose truncated digests still agree (None: none agree)."""
    agreeing = [int(k) for k, digest in engine_row["truncated"].items()
                if trainer_row["truncated"].get(k) == digest]
    return max(agreeing) if agreeing else None


def first_divergence(engine_trace: Path, trainer_trace: Path):
    """The first divergent door as a dict, or None; plus how many doors were compared."""
    engine_order, engine_rows, engine_whole = read_trace(engine_trace)
    trainer_order, trainer_rows, trainer_whole = read_trace(trainer_trace)
    compared = 0
    for door in trainer_order:
        if door not in engine_rows:
            continue
        compared += 1
        layer, region, ordinal = door
        found = {"layer": layer, "region": region, "ordinal": ordinal}
        shared = sorted(set(engine_rows[door]) & set(trainer_rows[door]), key=lambda t: (t[1], t[0]))
        differing = [t for t in shared if engine_rows[door][t]["digest"] != trainer_rows[door][t]["digest"]]
        if differing:
            token = differing[0]
            engine, trainer = engine_rows[door][token], trainer_rows[door][token]
            return {**found, "cases": [engine["case"], trainer["case"]],
                    "token": {"sequence": token[0], "position": token[1]},
                    "rows": {"engine": _where(engine), "trainer": _where(trainer)},
                    "num_tokens_differing": len(differing), "num_tokens_compared": len(shared),
                    "cases_differing": sorted({engine_rows[door][t]["case"] for t in differing}),
                    "agreeing_keep_bits_from_digests": agreeing_keep_bits(engine, trainer)}, compared
        if region in WHOLE_TENSOR_REGIONS and engine_whole[door][0] != trainer_whole[door][0]:
            return {**found, "cases": [engine_whole[door][1], trainer_whole[door][1]], "token": None, "rows": None,
                    "detail": "whole-tensor door (not token rows) differs"}, compared
    return None, compared


def _where(row: dict) -> dict:
    return {"forward": row["forward"], "row": row["row"], "case": row["case"]}
