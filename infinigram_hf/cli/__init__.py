"""`infinigram-hf`: build, query and inspect ∞-gram indexes, and use them as a language model,
from the command line (an application on top of the layers).

Every subcommand is one `add_<name>(subparsers)` function that declares its arguments and sets
`func=` to a `run_<name>(args) -> int` handler; adding a subcommand means writing that pair and
listing the `add_` function in its module's COMMANDS. Bad input (a missing file, an unknown id, a
tokenizer that does not match the index) prints one line on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .._core.safe_text import printable
from .._version import __version__
from . import (analysis_commands, index_commands, lm_commands, mixing_commands, official_commands, serve_command,
               trace_commands)
from .common import EXIT_USAGE, PROG, USER_ERRORS, CLIError

COMMANDS = (index_commands.COMMANDS + lm_commands.COMMANDS + mixing_commands.COMMANDS + analysis_commands.COMMANDS
            + official_commands.COMMANDS + trace_commands.COMMANDS + serve_command.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="The ∞-gram language model: build, query, inspect.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


def _check_option_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse drops a '--' given as an option's value ('--ids=--') and stores [] instead of
    a string (Python <= 3.12); refuse it rather than fail on a list later."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[args.command]._actions:
        if (action.option_strings and action.nargs is None and not isinstance(action, argparse._AppendAction)
                and isinstance(getattr(args, action.dest, None), list)):  # (repeatable options hold lists)
            raise CLIError(f"{action.option_strings[-1]}: '--' is not a valid value")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_option_values(parser, args)
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{PROG} {args.command}: error: {printable(msg)}", file=sys.stderr)  # (paths, file content)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `infinigram-hf query ... | head`
        sys.stderr.close()
        return 0


__all__ = ["main", "build_parser"]
