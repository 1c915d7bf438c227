"""`harness locate`: run the engine and the trainer on the same tokens with door tracing and name
the causally first divergent op: layer, region, case pair, first token and row, and the magnitude
(ULPs and agreeing mantissa bits of the first differing element).
Passes: a narrow workload, traced; if no door differs there, diff's own workload, traced where it
differs (locate/wide/: never less sensitive than `harness diff`); where the attention pins a
constant past diff's contexts, one key block past it (locate/long/). A second pass captures the
divergent door's inputs and outputs (locate/capture/; gate C01 makes it see the first's bits) for
the magnitude and `harness shrink`. Exit: 0 clean, 2 divergence, 3 inconclusive, 1 bad input.
Another --target: harness/stages/target_locate.py.
"""
import dataclasses
import json
from pathlib import Path

from gates import device
from gates.baseline import judged_tree
from gates.boundaries import key_block, longest_constant
from gates.compare import first_bit_difference
from gates.faults import register_all
from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, make_engine, make_requests, seeded_weights
from harness.door_capture import DoorCapture, save_capture
from harness.exit_codes import EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK
from harness.stages.target_locate import format_outside, locate_outside
from harness.stages.target_option import add_target_option, model_for_target
from harness.trace import Tracer, tensors_of
from harness.trace_compare import first_divergence
from harness.workspace import current_commit, open_repo
from kernels.contract import load_contract
from kernels.contract.identity import deployment_fingerprint
from kernels.models.config import load_model_config
from kernels.models.registry import config_name
from kernels.trainer.logprobs import scored_sequences
from kernels.trainer.trainer import Trainer

WORKLOAD = dict(num_sequences=6, new_tokens=8, min_prompt_len=6, max_prompt_len=24, arrival_spread=4)
SHAPE = EngineShape(tokens_per_step=16, max_running=6)
WIDE_WORKLOAD = {}  # diff's: Workload()'s defaults (64 sequences x 64 new tokens, prompts 8-80)
WIDE_SHAPE = EngineShape()  # diff's engine
WIDE_MICRO_BATCH = 8  # diff's trainer micro-batch
LONG_SEQUENCES = 3  # the long pass: a few sequences past the attention's longest constant
EXIT_BY_STATUS = {"clean": EXIT_OK, "divergent": EXIT_DIFFERENT, "inconclusive": EXIT_INCONCLUSIVE}


def _run_sides(config, contract, weights, setting, out_dir, facts, captures=None):
    """Engine generate + trainer score, each traced into out_dir (untraced when out_dir is
    None); DoorCaptures attach if given. setting: (workload, engine shape, micro-batch)."""
    workload, shape, micro_batch = setting
    engine = make_engine(config, contract, weights, workload, shape)
    trainer = Trainer(config, contract, weights=weights, micro_batch_size=micro_batch, device=device.target())
    tracers = {} if out_dir is None else {"engine": Tracer(out_dir, "engine").attach(engine),
                                          "trainer": Tracer(out_dir, "trainer", sequence_ids="running").attach(trainer)}
    for side, runtime in (("engine", engine), ("trainer", trainer)):
        if captures and side in captures:
            captures[side].attach(runtime, tracers[side])
    completions = engine.generate(make_requests(workload, config.vocab_size))
    trainer_logprobs = trainer.score(scored_sequences(completions))
    for tracer in tracers.values():
        tracer.close(**facts)
    return completions, trainer_logprobs


def _long_setting(contract, config, wide: Workload, seed: int):
    """A few sequences whose contexts run one key block past the largest integer the
    contract's attention pins, when that lies past the wide workload's longest context (and
    within the model's positions); else None. Prompts end just before the constant, so
    decode crosses it (as C03's probes)."""
    block, widest = key_block(contract), longest_constant(contract)
    if not wide.max_prompt_len + wide.new_tokens < widest + block <= getattr(config, "max_position", widest + block):
        return None
    workload = Workload(num_sequences=LONG_SEQUENCES, new_tokens=2 * block, min_prompt_len=max(1, widest - block),
                        max_prompt_len=widest, arrival_spread=2, seed=seed)
    return workload, SHAPE, LONG_SEQUENCES


def _figures(sides) -> dict:
    completions, trainer_logprobs = sides
    return mismatch_stats([c.logprob_tensor for c in completions], trainer_logprobs)


def _leading_agreeing_bits(left_bits: int, right_bits: int, width: int) -> int:
    return width - ((left_bits ^ right_bits) & ((1 << width) - 1)).bit_length()


def _magnitude(captured: dict) -> dict:
    """ULPs and exact agreeing leading bits of the first differing element of the token's row."""
    engine, trainer = captured["engine"], captured["trainer"]
    for index, (e, t) in enumerate(zip(tensors_of(engine["call"].output), tensors_of(trainer["call"].output))):
        e_rows = e if engine["row"] is None else e[engine["row"]]
        t_rows = t if trainer["row"] is None else t[trainer["row"]]
        if e_rows.shape != t_rows.shape or e_rows.dtype != t_rows.dtype:
            return {"output": index, "detail": f"shapes {list(e_rows.shape)} vs {list(t_rows.shape)}"}
        difference = first_bit_difference(e_rows, t_rows)
        if difference is not None:
            agreeing = _leading_agreeing_bits(difference.left_bits, difference.right_bits, difference.width_bits)
            return {"output": index, "element": list(difference.index), "engine_value": difference.left,
                    "trainer_value": difference.right, "ulps": difference.ulps,
                    "agreeing_leading_bits": agreeing, "width_bits": difference.width_bits,
                    "elements_differing": difference.num_differing, "elements": difference.numel}
    return {"detail": "the captured rows agree (the second pass did not reproduce the first)"}


def _capture_pass(config, contract, weights, setting, out_dir, trace_dir, facts, found) -> dict:
    door = (found["layer"], found["region"], found["ordinal"])
    token = found["token"] and (found["token"]["sequence"], found["token"]["position"])
    forwards = {side: found["rows"][side]["forward"] if token else 0 for side in ("engine", "trainer")}
    captures = {side: DoorCapture(door, forward, token) for side, forward in forwards.items()}
    _run_sides(config, contract, weights, setting, trace_dir / "second_pass", facts, captures)
    captured = {side: c.captured for side, c in captures.items()}
    if any(c is None for c in captured.values()):
        return {"detail": f"second pass did not meet the door on {[s for s, c in captured.items() if c is None]}"}
    save_capture(out_dir / "capture", captured)
    return _magnitude(captured)


def locate(model: str, contract_name: str, out_dir: Path, *, size="cut", config_path=None, seed=0,
           device_name="cpu") -> dict:
    """Trace both sides, find the first divergent door, measure it; writes locate.json.
    A narrow traced pass first (seconds); when it finds no door, diff's own workload untraced,
    and only if that differs a traced pass of it (out_dir/wide): as sensitive as diff, never
    `clean` where diff would see a difference; then, the same way, the long pass where the
    attention pins a constant past diff's contexts (out_dir/long)."""
    register_all()  # a contract may name a planted fault (gates/faults.py)
    device.select(device_name)  # both runtimes run there; traces and captures come back to the CPU
    config = load_model_config(config_path or config_name(model, size))
    if config.family != model:
        raise ValueError(f"config {config_path} is a {config.family} config, not {model}")
    contract = load_contract(contract_name)
    weights = seeded_weights(config)
    out_dir = Path(out_dir)
    narrow = (Workload(**WORKLOAD, seed=seed), SHAPE, WORKLOAD["num_sequences"])
    wide = (Workload(**WIDE_WORKLOAD, seed=seed), WIDE_SHAPE, WIDE_MICRO_BATCH)
    facts = {"model": model, "config": str(config_path or config_name(model, size)),
             "contract": str(contract_name), "contract_name": contract.name,
             "commit": current_commit(open_repo(judged_tree())), "seed": seed,
             "workload": WORKLOAD, "device": device_name, "environment": deployment_fingerprint()}
    setting, trace_dir = narrow, out_dir
    figures = _figures(_run_sides(config, contract, weights, narrow, out_dir, facts))
    found, compared = first_divergence(out_dir / "engine.jsonl", out_dir / "trainer.jsonl")
    passes = {"narrow": figures}
    later_passes = (("wide (diff's workload)", "wide", wide),
                    ("long (past the attention's constants)", "long", _long_setting(contract, config, wide[0], seed)))
    for name, folder, later in later_passes:
        if found is not None or figures["frac_tokens_differing"] or later is None:
            break  # a door found, or log-probs that differ with no door (inconclusive), ends it
        passes[f"{name}, untraced"] = figures = _figures(_run_sides(config, contract, weights, later, None, facts))
        if figures["frac_tokens_differing"]:
            setting, trace_dir = later, out_dir / folder
            facts = {**facts, "workload": dataclasses.asdict(later[0])}
            passes[f"{name}, traced"] = figures = _figures(
                _run_sides(config, contract, weights, later, trace_dir, facts))
            found, compared = first_divergence(trace_dir / "engine.jsonl", trace_dir / "trainer.jsonl")
    result = {**facts, "doors_compared": compared, "logprob_figures": figures, "passes": passes}
    if found is None:
        status = "inconclusive" if figures["frac_tokens_differing"] else "clean"
        result.update(status=status, layer=None, region=None, cases=None, token=None)
    else:
        result.update(status="divergent", **found)
        result["magnitude"] = _capture_pass(config, contract, weights, setting, out_dir, trace_dir, facts, found)
    (out_dir / "locate.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    return result


def format_result(result: dict) -> str:
    if result["status"] != "divergent":
        figures = result["logprob_figures"]
        return (f"locate: {result['status']} ({result['doors_compared']} doors compared; "
                f"{figures['frac_tokens_differing']:.1%} of {figures['num_tokens']} log-probs differ)")
    token, magnitude = result["token"], result.get("magnitude", {})
    lines = [f"first divergent op: layer {result['layer']}, region {result['region']} "
             f"(call {result['ordinal']} of that region in the layer)",
             f"  cases: {' vs '.join(result['cases'] or ['(whole tensor)'])}"]
    if token:
        lines.append(f"  first token: sequence {token['sequence']}, position {token['position']} "
                     f"(engine forward {result['rows']['engine']['forward']} row {result['rows']['engine']['row']}, "
                     f"trainer forward {result['rows']['trainer']['forward']} row {result['rows']['trainer']['row']}); "
                     f"{result['num_tokens_differing']}/{result['num_tokens_compared']} tokens differ there")
    if "ulps" in magnitude:
        lines.append(f"  magnitude: {magnitude['engine_value']!r} vs {magnitude['trainer_value']!r} at element "
                     f"{magnitude['element']}: {magnitude['ulps']} ulp, {magnitude['agreeing_leading_bits']} of "
                     f"{magnitude['width_bits']} leading bits agree")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--model", help="model family, e.g. nemotron (required for --target ours)")
    parser.add_argument("--contract", default="consistent", help="fast, consistent, or a YAML path")
    parser.add_argument("--size", default="cut", help="which shipped config (cut, cut-quant, ...)")
    parser.add_argument("--config", help="a model config YAML instead of --size (e.g. a repro's cut)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where both runtimes run")
    parser.add_argument("--out", default="runs/locate", help="directory for traces and locate.json")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_target_option(parser)
    parser.add_argument("--checkpoint", help="with another --target: the save_pretrained directory it runs")


def run(args) -> int:
    if args.target != "ours":
        model_for_target(args)  # the checkpoint it needs, the device it runs on
        result = locate_outside(args.target, args.checkpoint, Path(args.out), seed=args.seed)
        print(json.dumps(result, sort_keys=True) if args.json else format_outside(result))
        return EXIT_INCONCLUSIVE if result["status"] == "n/a" else EXIT_BY_STATUS[result["status"]]
    if args.model is None:
        raise ValueError("--model: give the model family (e.g. --model nemotron)")
    result = locate(args.model, args.contract, Path(args.out), size=args.size, config_path=args.config,
                    seed=args.seed, device_name=args.device)
    print(json.dumps(result, sort_keys=True) if args.json else format_result(result))
    return EXIT_BY_STATUS[result["status"]]
