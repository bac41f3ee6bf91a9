"""``blr-derive check`` (a family or a recipe's family, verified numerically) and ``blr-derive verify`` (is your
torch optimizer the derivation of a recipe?)."""
from __future__ import annotations

import os
import re
import sys

from blr_derive.cli.options import CMDLINE, _Parser, _recipe_only, _size_option, _sizes, _time_limit, _time_option
from blr_derive.core.budget import BudgetExceeded, derivation_budget
from blr_derive.core.errors import SpecError
from blr_derive.core.text import quote, terminal_safe

MAX_POINTS = 1000
MAX_SEED = 2**32 - 1


def cmd_check(argv):
    p = _Parser(prog="blr-derive check",
                description="Verify a family (or a recipe's family) numerically at random parameter "
                            "points: normalization, mu against quadrature, Monte Carlo and finite "
                            "differences, Fisher information, entropy and parameter round trips. "
                            "Prints a table; exit status 1 if any check fails.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="family or recipe YAML file(s), built-in family names or catalog recipe names")
    p.add_argument("--points", type=int, default=3, help=f"random parameter points, 1 to {MAX_POINTS} (default: 3)")
    p.add_argument("--seed", type=int, default=0, help=f"random seed, 0 to {MAX_SEED} (default: 0)")
    p.add_argument("--dim", type=int, default=2, help="dimension for vector/matrix families, 1 to 4 (default: 2)")
    _size_option(p)
    _time_option(p)
    args = p.parse_args(argv)
    if not 1 <= args.points <= MAX_POINTS:
        raise SpecError(f"--points must be an integer from 1 to {MAX_POINTS}", CMDLINE)
    if not 0 <= args.seed <= MAX_SEED:
        raise SpecError(f"--seed must be an integer from 0 to {MAX_SEED}", CMDLINE)
    if not 1 <= args.dim <= 4:
        raise SpecError("--dim must be an integer from 1 to 4", CMDLINE)
    sizes, seconds = _sizes(args.size), _time_limit(args)
    from blr_derive.api import check_file, format_report, resolve_input
    failed = []
    for f in args.files:
        with derivation_budget(seconds):
            rep = check_file(resolve_input(f)[0], points=args.points, seed=args.seed, dim=args.dim, sizes=sizes)
        sys.stdout.write(terminal_safe(format_report(rep)))
        sys.stdout.flush()
        if not rep.passed:
            failed.append(f"{quote(f, 200)}: {', '.join(c.name for c in rep.failed)}")
    for line in failed:
        print(f"blr-derive: check failed: {line}", file=sys.stderr)
    return 1 if failed else 0


def cmd_verify(argv):
    p = _Parser(prog="blr-derive verify",
                description="Check that your own torch optimizer is the BLR derivation of a recipe: both run on a "
                            "standard problem set (convex and non-convex losses, an MLP on mini-batches, intermittent "
                            "and zero gradients, two param groups, a scheduler, a state_dict reload; float64 and "
                            "float32).  Prints where they first differ and the derived assignment that differs on "
                            "your state; exit status 0 if equal, 1 if not.")
    p.add_argument("recipe", help="a recipe file or a catalog recipe name (e.g. adam)")
    p.add_argument("--against", required=True, metavar="MODULE:OBJECT",
                   help="your optimizer: a torch.optim.Optimizer subclass or a factory f(params, **hyperparameters), "
                        "imported from MODULE (the current directory is on the import path)")
    p.add_argument("--map", action="append", default=[], metavar="OURS=YOURS",
                   help="a hyperparameter or state name of the generated optimizer (lr, betas, exp_avg_sq, ...) and "
                        "yours where they differ (repeatable)")
    p.add_argument("--value", action="append", default=[], metavar="NAME=NUMBER",
                   help="a hyperparameter value for every run (repeatable); needed for those without a default "
                        "(IVON's lr and ess)")
    _time_option(p)
    args = p.parse_args(argv)
    values = {}
    for item in args.value:
        name, eq, text = item.partition("=")
        value = {"true": True, "false": False}.get(text.strip().lower(), text.strip())
        if isinstance(value, str):
            try:
                value = int(value) if re.fullmatch(r"[+-]?\d+", value) else float(value)
            except ValueError:
                value = None
        if not eq or not name.strip().isidentifier() or value is None:
            raise SpecError(f"--value takes NAME=NUMBER (or true/false), got '{quote(item)}'", CMDLINE)
        values[name.strip()] = value
    module, colon, attr = args.against.partition(":")
    if not colon or not all(x.isidentifier() for x in module.split(".") + attr.split(".")):
        raise SpecError(f"--against takes MODULE:OBJECT (e.g. my_optim:MyAdam), got '{quote(args.against)}'", CMDLINE)
    names = {}
    for item in args.map:
        ours, eq, yours = item.partition("=")
        if not eq or not ours.strip().isidentifier() or not yours.strip().isidentifier():
            raise SpecError(f"--map takes OURS=YOURS (two names), got '{quote(item)}'", CMDLINE)
        names[ours.strip()] = yours.strip()
    import importlib
    if os.getcwd() not in sys.path:                      # like `python -m`: the user's modules in the cwd
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module)
    except (Exception, SystemExit) as exc:               # noqa: BLE001 -- the user's module: any failure is theirs
        raise SpecError(f"--against: cannot import '{module}' ({type(exc).__name__}: {exc})", CMDLINE) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(f"--against: '{module}' has no '{attr}'", CMDLINE)
        obj = getattr(obj, part)
    from blr_derive.api import resolve_input
    from blr_derive.testing import equivalent
    path = _recipe_only(resolve_input, args.recipe, "verify takes a recipe (a file or a catalog name)")
    seconds = _time_limit(args)
    with derivation_budget(seconds):
        try:
            report = equivalent(str(path), obj, names=names, values=values)
        except (ValueError, TypeError) as exc:              # a hyperparameter missing or unknown, not an optimizer
            raise SpecError(str(exc).removeprefix("equivalent(): "), CMDLINE) from None
        except SystemExit as exc:                           # the user's optimizer exited: not a pass
            raise SpecError(f"--against: your optimizer called sys.exit({exc.code!r}) during the comparison",
                            CMDLINE) from None
        except BudgetExceeded as exc:
            if exc.file is not None:                        # while the recipe derived: located there
                raise
            raise SpecError(f"--against: the comparison did not finish within the time limit of {seconds:g} s (your "
                            "optimizer's steps; a larger --time-limit allows more)", CMDLINE) from None
    sys.stdout.write(terminal_safe(str(report)) + "\n")
    return 0 if report.equal else 1
