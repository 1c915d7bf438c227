"""`--target` as diff takes it (gates, locate and run next): which stack is judged. `ours`
builds our engine and trainer from --model/--size or --checkpoint and --contract; another
target (gates/target.py's TARGETS) is built from --checkpoint alone."""
from gates.target import TARGETS, device_refusal, target_class
from harness.stages.checkpoint_option import model_of


def add_target_option(parser) -> None:
    parser.add_argument("--target", default="ours", choices=sorted(TARGETS),
                        help="the stack judged: ours (kernels/, default); transformers, vllm or vllm-batch-invariant "
                             "run --checkpoint DIR")


def model_for_target(args, default: str | None = None) -> str:
    """The model family for our target (checkpoint_option.model_of); another target runs any
    causal LM from --checkpoint, which it needs, so --model is only a label there."""
    if args.target == "ours":
        return model_of(args, default)
    if args.checkpoint is None:
        raise ValueError(f"--target {args.target} runs a checkpoint: give --checkpoint DIR")
    refusal = device_refusal(args.target, getattr(args, "device", "cpu"))
    if refusal:
        raise ValueError(refusal)
    return args.model or "-"


def build_target(name: str, model: str, size: str, contract_name: str, checkpoint=None,
                 shape=None, micro_batch_size: int = 8) -> tuple:
    """(target, a line saying what it runs: size or checkpoint). Our kernels are imported only
    here, so `harness gates`, which takes the option, imports none of them."""
    from gates.targets.ours import OurTarget
    from gates.workload import EngineShape, seeded_weights
    from kernels.contract import load_contract
    from kernels.models.checkpoint import load_checkpoint
    from kernels.models.config import load_model_config
    from kernels.models.registry import config_name

    if name != "ours":
        return target_class(name)(checkpoint), f"checkpoint {checkpoint}"
    if checkpoint is not None:
        config, weights = load_checkpoint(checkpoint)
        size = f"checkpoint {checkpoint}"
    else:
        config = load_model_config(config_name(model, size))
        weights = seeded_weights(config)
    return OurTarget(config, load_contract(contract_name), weights, shape or EngineShape(), micro_batch_size), size
