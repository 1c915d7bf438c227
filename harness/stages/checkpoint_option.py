"""`--model` and `--checkpoint DIR` as diff, gates and run take them: with a checkpoint the
family comes from its config.json's model_type (kernels/models/checkpoint.py), and --model,
if given, must agree with it."""
from pathlib import Path

from kernels.models.checkpoint import checkpoint_family


def add_model_options(parser, default_model: str | None) -> None:
    default = f" (default {default_model})" if default_model else ""
    parser.add_argument("--model", help=f"model family, e.g. nemotron or qwen3{default}; or --checkpoint")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="a transformers save_pretrained directory (qwen3, nemotron_h or deepseek_v4), run "
                             "instead of the seeded cut; the family comes from its model_type")


def model_of(args, default: str | None = None) -> str:
    """The family asked for: --model, the checkpoint's model_type, or `default`; ValueError
    when none is given or --model and the checkpoint disagree."""
    if args.checkpoint is None:
        if args.model is None and default is None:
            raise ValueError("give --model (e.g. qwen3) or --checkpoint DIR")
        return args.model or default
    family = checkpoint_family(args.checkpoint)
    if args.model is not None and args.model != family:
        raise ValueError(f"--model {args.model} but {args.checkpoint} holds a {family} checkpoint (model_type)")
    return family


def checkpoint_path(args) -> str | None:
    """The checkpoint as an absolute path (gates run in other directories), or None."""
    return None if args.checkpoint is None else str(Path(args.checkpoint).resolve())
