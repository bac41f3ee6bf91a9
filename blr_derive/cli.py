"""The ``blr-derive`` command line.

    blr-derive RECIPE.yaml --target numpy [-o OUT]   generate update code
    blr-derive explain RECIPE.yaml [-o OUT] [--format markdown|latex|html]
                                                       the derivation, step by step
    blr-derive catalog [--check]                       regenerate every catalog artifact
    blr-derive families                                list the built-in families (T, h, λ, μ)

Bad input (malformed YAML, unknown keys or symbols, code in expressions, families
that are not normalizable or minimal, rules that do not apply) prints one line
``FILE:LINE: problem`` and exits with status 2; no output file is written or changed.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from . import __version__
from .errors import BLRError, SpecError

COMMANDS = ("explain", "catalog", "families", "check", "compare")


def _write_atomic(path: Path, text: str):
    """Write via a temporary file and rename, so a failure never leaves a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        umask = os.umask(0)                            # mkstemp creates 0600; give the usual 0666 & ~umask
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _emit(text: str, out):
    if out is None or out == "-":
        sys.stdout.write(text)
    else:
        _write_atomic(Path(out), text)


def _parser_generate():
    p = argparse.ArgumentParser(
        prog="blr-derive",
        description="Derive a learning algorithm from the Bayesian learning rule and emit its update code. "
                    f"Other commands: {', '.join(COMMANDS)} (run 'blr-derive COMMAND --help').",
    )
    p.add_argument("recipe", help="recipe YAML file (e.g. catalog/newton.yaml)")
    p.add_argument("--target", default="numpy", help="code generation target (default: numpy)")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    _size_option(p)
    p.add_argument("--version", action="version", version=f"blr-derive {__version__}")
    return p


def _size_option(p):
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="instantiate a sized recipe at this size, e.g. --size K=5 (repeatable; see 'sizes' in README)")


def _sizes(items) -> dict:
    """--size NAME=N ... → {NAME: N}; a malformed one is a one-line error (exit 2)."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name.isidentifier():
            raise SpecError(f"--size takes NAME=N (e.g. K=5), got '{item}'", "<command line>")
        if name in out:
            raise SpecError(f"--size {name} is given twice", "<command line>")
        if not (value.isdigit() and len(value) <= 9):
            raise SpecError(f"size {name} must be a positive integer, got '{value}'", "<command line>")
        out[name] = int(value)
    return out


def cmd_generate(argv):
    args = _parser_generate().parse_args(argv)
    from .api import generate
    _emit(generate(args.recipe, args.target, sizes=_sizes(args.size)), args.output)
    return 0


def cmd_explain(argv):
    p = argparse.ArgumentParser(prog="blr-derive explain",
                                description="Print the derivation of a recipe step by step (Markdown with LaTeX): "
                                            "each step names its rule and the paper equation it implements.")
    p.add_argument("recipe")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument("--format", choices=("markdown", "latex", "html"), default="markdown",
                   help="markdown (default; equations in $$...$$), a standalone LaTeX document, or a standalone "
                        "HTML page with the equations typeset by the bundled KaTeX (no network at view time)")
    _size_option(p)
    args = p.parse_args(argv)
    from .api import derive_file
    _, D = derive_file(args.recipe, _sizes(args.size))
    render = {"markdown": D.to_markdown, "latex": D.to_latex, "html": D.to_html}[args.format]
    _emit(render(), args.output)
    return 0


def cmd_compare(argv):
    p = argparse.ArgumentParser(prog="blr-derive compare",
                                description="Show side by side what separates two recipes: the candidate family, "
                                            "the loss and the approximations each one adds or removes (the Table 1 "
                                            "view: e.g. OGN vs VOGN is 'remove the delta method').")
    p.add_argument("recipe_a")
    p.add_argument("recipe_b")
    args = p.parse_args(argv)
    from .compare import compare_recipes
    sys.stdout.write(compare_recipes(args.recipe_a, args.recipe_b))
    return 0


def cmd_catalog(argv):
    p = argparse.ArgumentParser(prog="blr-derive catalog",
                                description="Regenerate every artifact catalog/generated/<target>/<recipe>.py from "
                                            "the catalog recipes.")
    p.add_argument("--catalog", help="catalog folder (default: the bundled catalog)")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if any artifact differs")
    p.add_argument("--target", action="append", help="only this target (repeatable)")
    args = p.parse_args(argv)
    from codegen import TARGETS, get_target
    from .resources import catalog_dir
    root = Path(args.catalog) if args.catalog else catalog_dir()
    targets = args.target or list(TARGETS)
    recipes = sorted(root.glob("*.yaml"))
    if not recipes:
        raise SpecError("no recipes found", str(root), None)
    from .errors import CodegenError
    outputs = []
    from codegen import emit

    from .api import derive_file
    from .ir import build_ir
    for r in recipes:
        _, D = derive_file(r)                          # derive once, render for every target
        ir = build_ir(D, f"catalog/{r.name}")
        for t in targets:
            try:
                text = emit(ir, t)
            except CodegenError:
                continue        # this target cannot express the recipe (e.g. torch needs elementwise updates)
            outputs.append((root / "generated" / t / f"{r.stem}{get_target(t).suffix}", text))
    stale = []
    for path, text in outputs:
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            stale.append(path)
            if not args.check:
                _write_atomic(path, text)
    for path in stale:
        print(f"{'differs' if args.check else 'wrote'}: {path}")
    print(f"{len(outputs)} artifacts, {len(stale)} {'differ' if args.check else 'updated'}")
    return 1 if (args.check and stale) else 0


def cmd_families(argv):
    p = argparse.ArgumentParser(prog="blr-derive families",
                                description="List the built-in exponential families with T(θ), h(θ), λ and μ.")
    p.parse_args(argv)
    from .family import builtin_family_names, load_family
    for name in builtin_family_names():
        f = load_family(name)
        print(f"{f.name}: {f.description}")
        params = [f"{p.name} ({p.shape}, {p.domain}{', fixed' if p.fixed else ''})" for p in f.params.values()]
        print(f"  params : {', '.join(params)}")
        print(f"  T(θ)   : {', '.join(map(str, f.T))}")
        print(f"  h(θ)   : {f.h}")
        print(f"  λ      : {', '.join(map(str, f.eta))}")
        print(f"  μ      : {', '.join(map(str, f.mu_ord))}")
        print(f"  A(λ)   : {f.A}")
        print()
    return 0


def cmd_check(argv):
    p = argparse.ArgumentParser(prog="blr-derive check",
                                description="Verify a family (or a recipe's family) numerically at random parameter "
                                            "points: normalization, mu against quadrature, Monte Carlo and finite "
                                            "differences, Fisher information, entropy and parameter round trips. "
                                            "Prints a table; exit status 1 if any check fails.")
    p.add_argument("files", nargs="+", metavar="FILE", help="family or recipe YAML file(s)")
    p.add_argument("--points", type=int, default=3, help="random parameter points (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--dim", type=int, default=2, help="dimension for vector/matrix families (default: 2)")
    _size_option(p)
    args = p.parse_args(argv)
    if args.points < 1 or not 1 <= args.dim <= 4:
        p.error("--points must be >= 1 and --dim between 1 and 4")
    from .check import check_file, format_report
    failed = []
    for f in args.files:
        rep = check_file(f, points=args.points, seed=args.seed, dim=args.dim, sizes=_sizes(args.size))
        sys.stdout.write(format_report(rep))
        sys.stdout.flush()
        if not rep.passed:
            failed.append(f"{f}: {', '.join(c.name for c in rep.failed)}")
    for line in failed:
        print(f"blr-derive: check failed: {line}", file=sys.stderr)
    return 1 if failed else 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in COMMANDS:
            cmd = {"explain": cmd_explain, "catalog": cmd_catalog, "families": cmd_families, "compare": cmd_compare, "check": cmd_check}[argv[0]]
            return cmd(argv[1:])
        return cmd_generate(argv)
    except BLRError as exc:
        print(f"blr-derive: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # e.g. `blr-derive families | head -1`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - an engine bug, not bad input: one line, status 3 (README "Safety model")
        if os.environ.get("BLR_DERIVE_TRACEBACK"):
            raise
        what = " ".join(str(exc).split())[:200]
        print(f"blr-derive: internal error: {type(exc).__name__}: {what} (a bug in blr-derive: please report it "
              "with the input files; BLR_DERIVE_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
