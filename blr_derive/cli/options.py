"""The command line's shared argument handling: a parser whose mistakes are one located line (exit 2), the time
budget and size options, and the check that a command's argument is a recipe."""
from __future__ import annotations

import argparse

from blr_derive.core.budget import DEFAULT_SECONDS
from blr_derive.core.errors import SpecError
from blr_derive.core.sizes import HARD_MAX
from blr_derive.core.text import quote

CMDLINE = "<command line>"


class _Parser(argparse.ArgumentParser):
    """argparse with bad arguments as one located line (exit 2), like every other input error."""

    def error(self, message):
        raise SpecError(f"{self.prog}: {message}", CMDLINE)


def _time_option(p):
    p.add_argument("--time-limit", type=float, default=DEFAULT_SECONDS, metavar="SECONDS",
                   help=f"wall-clock budget for each derivation or check (default: {DEFAULT_SECONDS:g} s); when it "
                        "runs out the command stops with a located error")


def _time_limit(args):
    t = args.time_limit
    if not (t > 0 and t <= 86400):
        raise SpecError("--time-limit must be a number of seconds in (0, 86400]", CMDLINE)
    return t


def _size_option(p):
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="instantiate a sized recipe at this size, e.g. --size K=5 (repeatable; see 'sizes' in docs/family-format.md)")


def _sizes(items) -> dict:
    """--size NAME=N ... → {NAME: N}; a malformed one is a one-line error (exit 2)."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name.isidentifier():
            raise SpecError(f"--size takes NAME=N (e.g. K=5), got '{quote(item)}'", CMDLINE)
        if name in out:
            raise SpecError(f"--size {name} is given twice", CMDLINE)
        # ASCII digits only: str.isdigit() also holds for '²', which int() refuses (an internal error)
        if not (value.isascii() and value.isdigit()):
            raise SpecError(f"size {name} must be a positive integer, got '{quote(value)}'", CMDLINE)
        if len(value.lstrip("0")) > 9:
            raise SpecError(f"size {name} = {quote(value)} is too large: a size is at most {HARD_MAX} (see 'sizes' "
                            "in docs/family-format.md)", CMDLINE)
        out[name] = int(value)
    return out


def _recipe_only(resolve, ref, takes: str):
    """The recipe a command names (a file or a catalog name); a family file is one located line saying what the
    command ``takes`` instead."""
    path, kind = resolve(ref)
    if kind == "family":
        raise SpecError(f"this is a family file; {takes}", str(path), 1)
    return path
