"""The ``blr-derive`` command line.

    blr-derive RECIPE.yaml --target numpy [-o OUT]   generate update code (RECIPE: a file or a catalog name)
    blr-derive FAMILY.yaml --target torch --loss abstract --approx delta [--approx ...] [--hyper NAME=VALUE]
                                                       derive from a family file (the design card's command)
    blr-derive explain RECIPE.yaml [-o OUT] [--format markdown|latex|html]
                                                       the derivation, step by step
    blr-derive catalog [--check]                       regenerate every catalog artifact
    blr-derive families                                list the built-in families (T, h, λ, μ)
    blr-derive list [WORD...] [--kind recipe|family]   the catalog recipes and built-in families, one line each
    blr-derive verify RECIPE --against MODULE:OBJECT [--map OURS=YOURS]
                                                       is your optimizer the recipe's derivation? (exit 0/1)
    blr-derive suggest --loss EXPR [--variable NAME] [--support S] [--data NAME[=DECL]] [--write-family FILE]
                                                       the families in which a loss is conjugate, with commands

Bad input (malformed YAML, unknown keys or symbols, code in expressions, families
that are not normalizable or minimal, rules that do not apply) prints one line
``FILE:LINE: problem`` and exits with status 2; no output file is written or changed.
"""
from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

from blr_derive import __version__
from blr_derive.codegen import TARGET_NAMES
from blr_derive.core.io import MAX_GENERATED_BYTES, command_label, check_tree, output_problem, write_atomic
from blr_derive.core.budget import BudgetExceeded, derivation_budget, location, where as set_location
from blr_derive.core.errors import BLRError, SpecError, printable
from blr_derive.core.resources import catalog_dir, families_dir
from blr_derive.report.family_index import INDEX_NAME, digest, listing, read_index
from blr_derive.core.text import did_you_mean, file_safe, quote, terminal_safe
from blr_derive.core.yamlio import read_text_file, recording_reads
from blr_derive.cli.options import CMDLINE, _Parser, _recipe_only, _size_option, _sizes, _time_limit, _time_option
from blr_derive.cli.checks import cmd_check, cmd_verify
from blr_derive.cli.names import cmd_list

COMMANDS = ("list", "explain", "catalog", "families", "check", "compare", "verify", "suggest")
MAX_JOBS = 64


def _check_output(out):
    """Refuse a bad ``-o`` before any work (so that nothing is derived for nothing, and nothing is touched)."""
    if out == "":
        raise SpecError("-o: empty output path", CMDLINE)
    if out is not None and out != "-":
        problem = output_problem(Path(out))
        if problem is not None:
            raise SpecError(problem, out)


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):      # either does not exist (yet), or is not a path
        return False


def _refuse_reads(out, reads, what: str) -> None:
    """-o naming a file the derivation read (the family file a recipe names, ``family: my_family.yaml``) would
    replace that input with the output, as -o naming the recipe itself would: refused, nothing written."""
    if out in (None, "-"):
        return
    for name, digest in reads.items():
        if digest is not None and _same_file(name, out):
            raise SpecError(f"-o names a file the recipe reads ({quote(name, 200)}); write the {what} to another "
                            "file", out)


def _emit(text: str, out):
    if out is None or out == "-":
        sys.stdout.write(terminal_safe(text))
    else:
        write_atomic(Path(out), text)


def _parser_generate():
    p = _Parser(
        prog="blr-derive",
        description="Derive a learning algorithm from the Bayesian learning rule and emit its update code. "
                    f"Other commands: {', '.join(COMMANDS)} (run 'blr-derive COMMAND --help').",
    )
    p.add_argument("recipe", help="a recipe YAML file (e.g. catalog/newton.yaml), a catalog recipe name (adam), "
                                   "or a family YAML file or built-in family name with --loss and --approx")
    p.add_argument("--target", default="numpy", metavar="{" + ",".join(TARGET_NAMES) + "}",
                   help=f"code generation target: {', '.join(TARGET_NAMES)} (default: numpy)")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    _family_options(p)
    _size_option(p)
    _time_option(p)
    p.add_argument("--version", action="version", version=f"blr-derive {__version__}")
    return p


def _family_options(p):
    g = p.add_argument_group("deriving from a family file (blr-derive FAMILY.yaml --loss ... --approx ...)")
    g.add_argument("--loss", metavar="EXPR", help="'abstract' (gradient and Hessian oracles) or an expression of the "
                                                  "family's variable, e.g. '(theta - 3)**2/2'")
    g.add_argument("--data", action="append", default=[], metavar="NAME[=DECL]",
                   help="a data input of an explicit --loss (repeatable): a number by default, or declared, e.g. "
                        "--data 'X={shape: [N, P]}' (see 'data' in docs/recipe-format.md)")
    g.add_argument("--approx", action="append", default=[], metavar="RULE",
                   help="an approximation, in order (repeatable): a rule name (delta) or one YAML flow mapping "
                        "('ema_momentum: {rate: beta1, state: u}')")
    g.add_argument("--hyper", action="append", default=[], metavar="NAME=VALUE",
                   help="declare a hyperparameter and its default (repeatable), e.g. --hyper beta1=0.9")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other recipe key (repeatable), e.g. --set 'state_init={s: 1.0}' or --set class_name=MyRule")
    g.add_argument("--name", help="the recipe's name (default: the family's)")


def _from_family(args) -> bool:
    return bool(args.loss is not None or args.approx or args.hyper or args.set or args.data
                or args.name is not None)


def _recipe_input(args, target: str = "numpy"):
    """(what to derive, header label) for a recipe argument: a recipe path or catalog name as it is, or a family
    file (or built-in family name) turned into a recipe by --loss/--approx/--hyper/--set/--name.  A family
    without them is one located line that shows the options to add (checked to derive for ``target``)."""
    import blr_derive.api as api
    path, kind = api.resolve_input(args.recipe)
    if kind == "recipe":
        if _from_family(args):
            # an error message's command-line form (--set 'parameter=m') has its recipe-file form: the key itself
            keys = [kv.split("=", 1) for kv in args.set if "=" in kv]
            edit = (f"add the key to the file instead: {'; '.join(f'{quote(k.strip(), 40)}: {quote(v.strip(), 80)}' for k, v in keys)}"
                    if keys else "edit its 'loss' and 'approximations'")
            raise SpecError(f"--loss, --data, --approx, --hyper, --set and --name derive from a family file; "
                            f"'{quote(args.recipe)}' is a recipe ({edit})", CMDLINE)
        # a catalog recipe, by name or by any path, keeps the catalog's machine-independent label (the header of
        # catalog/generated/, byte for byte); any other path is recorded as given, so that the header's command
        # regenerates the module from where this one ran
        in_catalog = args.recipe.isidentifier() or _same_file(Path(path).parent, catalog_dir())
        return path, (None if in_catalog else command_label(args.recipe))
    if not _from_family(args):
        words = api.suggest_options(path, target)
        ref = quote(args.recipe, 200)
        if words is None:
            how = (f"name a loss and approximations (--loss EXPR --approx RULE ...; no abstract loss with "
                   f"{', '.join('+'.join(a) for a in api.SUGGESTED_APPROXIMATIONS)} derives for it on the "
                   f"{target} target)")
        else:
            how = f"derive from it with: blr-derive {ref} --target {target} {' '.join(words)}"
        raise SpecError(f"this is a family file, not a recipe: {how}; or write a recipe file, e.g. "
                        f"{{name: my_rule, family: {ref}, loss: abstract, approximations: [...]}}", str(path), 1)
    options = dict(loss=args.loss, approximations=args.approx, hyperparameters=args.hyper, settings=args.set,
                   name=args.name, data=args.data)
    return api.recipe_from_options(path, **options), api.options_label(args.recipe, **options)


def cmd_generate(argv):
    args = _parser_generate().parse_args(argv)
    if args.target not in TARGET_NAMES:
        raise SpecError(f"unknown target '{quote(args.target)}'{did_you_mean(args.target, TARGET_NAMES)} "
                        f"(known: {', '.join(TARGET_NAMES)})", CMDLINE)
    _check_output(args.output)
    if args.output not in (None, "-") and _same_file(args.recipe, args.output):
        raise SpecError("-o names the input file itself; write the generated code to another file", args.output)
    sizes, seconds = _sizes(args.size), _time_limit(args)
    from blr_derive.api import generate
    with derivation_budget(seconds), recording_reads() as reads:
        ref, label = _recipe_input(args, args.target)
        text = generate(ref, args.target, label=label, sizes=sizes)
    _refuse_reads(args.output, reads, "generated code")
    _emit(text, args.output)
    return 0


def cmd_explain(argv):
    p = _Parser(prog="blr-derive explain",
                description="Print the derivation of a recipe step by step (Markdown with LaTeX): "
                            "each step names its rule and the paper equation it implements.")
    p.add_argument("recipe", help="a recipe file, a catalog recipe name, or a family file with --loss and --approx")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument("--format", choices=("markdown", "latex", "html"), default="markdown",
                   help="markdown (default; equations in $$...$$), a standalone LaTeX document, or a standalone "
                        "HTML page with the equations typeset by the bundled KaTeX (no network at view time)")
    _family_options(p)
    _size_option(p)
    _time_option(p)
    args = p.parse_args(argv)
    _check_output(args.output)
    if args.output not in (None, "-") and _same_file(args.recipe, args.output):
        raise SpecError("-o names the input file itself; write the report to another file", args.output)
    sizes, seconds = _sizes(args.size), _time_limit(args)
    from blr_derive.api import derive_file
    with derivation_budget(seconds), recording_reads() as reads:
        ref, _ = _recipe_input(args)
        _, D = derive_file(ref, sizes)              # a DerivationView: the reports
        render = {"markdown": D.to_markdown, "latex": D.to_latex, "html": D.to_html}[args.format]
        text = render()
    _refuse_reads(args.output, reads, "report")
    # a report file is read in terminals and editors too: no control bytes; ordinary Unicode kept in a file
    _emit(terminal_safe(text) if args.output in (None, "-") else file_safe(text), args.output)
    return 0


def cmd_compare(argv):
    p = _Parser(prog="blr-derive compare",
                description="Show side by side what separates two recipes: the candidate family, "
                            "the loss and the approximations each one adds or removes (the Table 1 "
                            "view: e.g. OGN vs VOGN is 'remove the delta method').")
    p.add_argument("recipe_a")
    p.add_argument("recipe_b")
    _time_option(p)
    args = p.parse_args(argv)
    seconds = _time_limit(args)
    from blr_derive.api import compare_recipes, resolve_input
    with derivation_budget(seconds):
        a, b = (_recipe_only(resolve_input, r, "compare takes two recipes (files or catalog names)")
                for r in (args.recipe_a, args.recipe_b))
        text = compare_recipes(a, b)
    sys.stdout.write(terminal_safe(text))
    return 0


def cmd_catalog(argv):
    p = _Parser(prog="blr-derive catalog",
                description="Regenerate every artifact catalog/generated/<target>/<recipe>.py from "
                            "the catalog recipes.")
    p.add_argument("--catalog", help="catalog folder (default: the bundled catalog)")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if any artifact differs")
    p.add_argument("--target", action="append", choices=TARGET_NAMES, help="only this target (repeatable)")
    p.add_argument("--jobs", type=int, default=None,
                   help=f"worker processes, 1 to {MAX_JOBS} (default: one per available core, at most 8)")
    _time_option(p)
    args = p.parse_args(argv)
    seconds = _time_limit(args)
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        raise SpecError(f"--jobs must be an integer from 1 to {MAX_JOBS}", CMDLINE)
    root = Path(args.catalog) if args.catalog else catalog_dir()
    _check_generated_folders(root, args.target or TARGET_NAMES)
    from blr_derive.api import catalog_artifacts
    outputs = catalog_artifacts(args.catalog, args.target, seconds, jobs=args.jobs)
    stale = []
    for path, text in outputs:                       # every path checked (and read) before anything is written
        check_tree(root, path)
        if _generated_text(path, args.check) != text:
            if not args.check:
                problem = output_problem(path, follow_links=False)
                if problem is not None:
                    raise SpecError(problem, str(path))
            stale.append((path, text))
    for path, text in stale:
        if not args.check:
            write_atomic(path, text, follow_links=False)
    for path, _ in stale:
        print(f"{'differs' if args.check else 'wrote'}: {quote(path, 1000)}")    # a name's line break escaped
    orphans = _orphaned_artifacts(root, args.target or TARGET_NAMES, [path for path, _ in outputs])
    for path in orphans:                            # reported, never deleted: the tree is the user's
        print(f"no recipe generates: {quote(path, 1000)} (delete it, or restore the recipe that made it)")
    print(f"{len(outputs)} artifacts, {len(stale)} {'differ' if args.check else 'updated'}"
          + (f", {len(orphans)} generated by no recipe" if orphans else ""))
    return 1 if (args.check and (stale or orphans)) else 0


def _orphaned_artifacts(root: Path, targets, outputs):
    """The modules in the catalog's generated folders of ``targets`` that no recipe generates any more (a recipe
    renamed or deleted, or one whose target now refuses it), besides the folders' own ``__init__.py``: --check
    counted only the artifacts the recipes generate, so such a file stayed, stale, with '0 differ'."""
    made = {os.path.normcase(os.path.abspath(p)) for p in outputs}
    out = []
    for t in targets:
        folder = root / "generated" / t
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        out += [folder / n for n in names if n.endswith(".py") and n != "__init__.py"
                and os.path.normcase(os.path.abspath(folder / n)) not in made]
    return out


def _check_generated_folders(root: Path, targets):
    """Before any work (nothing derived for nothing): the folders generated files go to and every entry in them
    named after a recipe (a target's artifact, whatever its suffix) by :func:`check_tree`.  The artifacts' own
    paths are checked again once they are known, before the first is written or read."""
    if not root.is_dir():                               # no recipes: said by catalog_artifacts
        return
    stems = [p.stem for p in root.glob("*.yaml")]
    for t in targets:
        folder = root / "generated" / t
        check_tree(root, folder, folder=True)
        try:
            names = sorted(os.listdir(folder))
        except OSError:                                 # not there yet: created when written
            continue
        for name in names:
            if any(name.startswith(f"{stem}.") for stem in stems):
                check_tree(root, folder / name)


def _generated_text(path: Path, check: bool):
    """The text of an existing generated file (None if there is none), read bounded, never through a link: a file
    too large or not UTF-8 is a located error for --check and, for a regeneration, a file to replace."""
    if not os.path.lexists(path):
        return None
    try:
        return read_text_file(path, "generated file", MAX_GENERATED_BYTES, follow_links=False)
    except SpecError:
        if check:
            raise
        return None


def cmd_families(argv):
    p = _Parser(prog="blr-derive families",
                description="List the built-in exponential families with T(θ), h(θ), λ and μ.")
    p.parse_args(argv)
    index = read_index(catalog_dir() / "generated" / INDEX_NAME)
    for path in sorted(families_dir().glob("*.yaml"), key=lambda p: p.stem):
        sha, block = index.get(path.stem, (None, None))
        if sha != digest(path):              # not in the index, or edited since: derive it
            from blr_derive.api import family
            block = listing(family(str(path)))
        sys.stdout.write(terminal_safe(block) + "\n")
    return 0


def cmd_suggest(argv):
    p = _Parser(prog="blr-derive suggest",
                description="The candidate families in which a loss is conjugate (linear in the sufficient "
                            "statistics: E_q[loss] exact, one step with rho = 1 is the posterior), best first, each "
                            "with the command that derives its update; where no built-in family fits, a family "
                            "built from the loss's own statistics (--write-family FILE).")
    p.add_argument("--loss", required=True, metavar="EXPR", help="the loss in the recipe grammar, e.g. "
                   "'n*theta - s*log(theta)' (write --loss=EXPR when it starts with a minus sign)")
    p.add_argument("--variable", default="theta", metavar="NAME", help="the loss's variable (default: theta)")
    p.add_argument("--support", metavar="S", help="only families of this support (positive, unit_interval, "
                   "simplex, ...); default: all, the loss's own domain first")
    p.add_argument("--data", action="append", default=[], metavar="NAME[=DECL]",
                   help="declare a data input as in the family command (repeatable); the loss's other names are "
                        "numbers")
    p.add_argument("--write-family", metavar="FILE", help="where no built-in family fits, write the family built "
                                                          "from the loss's statistics to FILE")
    _time_option(p)
    args = p.parse_args(argv)
    seconds = _time_limit(args)
    from blr_derive.api import suggest
    with derivation_budget(seconds):
        text = suggest(args.loss, args.variable, args.data, args.support, args.write_family).to_text()
    sys.stdout.write(terminal_safe(text))
    return 0


def _error_line(kind: str, text: str) -> str:
    """One line on stderr: the message with every non-printable character escaped, line breaks included (a message
    may quote untrusted text, a file name with a line break in it among them: no control sequence reaches the
    terminal, and no line break ends the message before its location and problem), at most 1000 characters."""
    return f"blr-derive: {kind}: {quote(str(text).strip(), 1000)}"


def _flushed(status: int) -> int:
    """``status``, once what the command printed has reached standard output: a write that fails (a full disk,
    ``> /dev/full``) is raised here, inside :func:`main`, not at the interpreter's exit."""
    sys.stdout.flush()
    return status


#: the errors of a write that the disk or the device refuses (ENOSPC: /dev/full or a full disk; EDQUOT; EFBIG)
_FULL = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, n))


def _quiet_stdout() -> None:
    """Point standard output at the null device once a write to it failed, so that the interpreter's own flush at
    exit does not fail again (an in-process caller's stream without a file descriptor is left as it is)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _small_bound() -> str | None:
    """BLR_DERIVE_MEMORY_LIMIT as set, where it bounds the command below the default (else None)."""
    bound = os.environ.get("BLR_DERIVE_MEMORY_LIMIT", "").strip()
    return bound if bound.isdigit() and 0 < int(bound) < DEFAULT_MEMORY else None


def _too_large(exc, argv) -> None:
    """The one line for input that exhausted memory or the recursion limit, naming a memory bound the caller set
    below the default (BLR_DERIVE_MEMORY_LIMIT=150000000 is then the likelier cause than the input)."""
    file, line = getattr(exc, "blr_location", None) or location()
    where = f"{printable(file or _input_argument(argv))}{f':{line}' if line else ''}"
    bound = _small_bound()
    hint = f"; BLR_DERIVE_MEMORY_LIMIT={bound} bytes bounds this command" if isinstance(exc, MemoryError) and bound else ""
    print(_error_line("error", f"{where}: the input is too large or too deeply nested to derive "
                               f"({type(exc).__name__}{hint})"), file=sys.stderr)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    set_location(None, None)        # nothing located yet (an earlier call in this process may have left its place)
    try:
        if argv and argv[0] in COMMANDS:
            cmd = {"list": cmd_list, "explain": cmd_explain, "catalog": cmd_catalog, "families": cmd_families,
                   "compare": cmd_compare, "check": cmd_check, "verify": cmd_verify, "suggest": cmd_suggest}[argv[0]]
            return _flushed(cmd(argv[1:]))
        if argv:
            _refuse_misspelt_command(argv[0])
        return _flushed(cmd_generate(argv))
    except BLRError as exc:
        print(_error_line("error", exc), file=sys.stderr)
        return 2
    except BudgetExceeded as exc:
        where = printable(exc.file or _input_argument(argv))
        print(_error_line("error", f"{where}{f':{exc.line}' if exc.line else ''}: {exc}"), file=sys.stderr)
        return 2
    except (RecursionError, MemoryError) as exc:
        # deeply nested or huge input that the bounds let through: bad input, not an engine bug
        _too_large(exc, argv)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # e.g. `blr-derive families | head -1`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except SystemExit as exc:                         # --help and --version print and exit 0
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # noqa: BLE001 - an engine bug, not bad input: one line, status 3 (README "Safety model")
        if ((isinstance(exc, ImportError) and any(w in str(exc) for w in ("failed to map segment", "allocate memory")))
                or (isinstance(exc, (ImportError, SystemError)) and _small_bound())):
            # a library that cannot be mapped within the memory bound, or a C extension that failed to allocate and
            # said so badly ('SystemError: error return without exception set') under BLR_DERIVE_MEMORY_LIMIT
            # =200000000: out of memory, not a bug
            _too_large(MemoryError(), argv)
            return 2
        if isinstance(exc, OSError) and exc.errno in _FULL:
            # `blr-derive list > /dev/full`, a full disk or quota: where the output goes, not a bug (an -o file's
            # own failures are located errors already, write_atomic)
            _quiet_stdout()
            where = printable(exc.filename) if exc.filename else "<standard output>"
            print(_error_line("error", f"{where}: cannot write ({exc.strerror or type(exc).__name__})"),
                  file=sys.stderr)
            return 2
        if os.environ.get("BLR_DERIVE_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no", "off"):
            raise
        what = " ".join(str(exc).split())[:200]
        print(_error_line("internal error", f"{type(exc).__name__}: {what} (a bug in blr-derive: please report it "
                                            "with the input files; BLR_DERIVE_TRACEBACK=1 shows the traceback)"),
              file=sys.stderr)
        return 3


def _refuse_misspelt_command(word: str) -> None:
    """``blr-derive chek adam``: a first word that is no command, no file and no catalog recipe or built-in family
    name, but is spelt close to a command, is refused with the command it could have been (one located line, exit
    2) instead of being read as a recipe that does not exist."""
    # os.path's tests answer False where the name cannot be a file (too long for the file system: ENAMETOOLONG);
    # pathlib's raise
    if not word.isidentifier() or os.path.lexists(word):
        return
    if any(os.path.isfile(folder / f"{word}.yaml") for folder in (catalog_dir(), families_dir())):
        return
    hint = did_you_mean(word, COMMANDS)
    if hint:
        raise SpecError(f"'{quote(word)}' is not a command, a file, or a catalog recipe or family name{hint} "
                        f"(commands: {', '.join(COMMANDS)}; recipes and families: `blr-derive list`)", CMDLINE)


def _input_argument(argv) -> str:
    """The input file a command line names (its first positional argument), for messages without a location."""
    args = argv[1:] if argv and argv[0] in COMMANDS else argv
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = "=" not in a and a not in ("--check", "--help", "-h", "--version")
        else:
            return a
    return CMDLINE


def entry():
    """The console script (``blr-derive``, ``python -m blr_derive``): :func:`main` with a memory bound, so that
    untrusted input cannot exhaust the machine (``BLR_DERIVE_MEMORY_LIMIT`` in bytes, 0 for none), and with
    output that any terminal can take (:func:`survive_any_terminal`)."""
    survive_any_terminal()
    _limit_memory()
    sys.exit(main())


def survive_any_terminal(streams=None):
    """Standard output and error write what their encoding cannot encode as a backslash escape (``ρ`` on an ASCII
    or Latin-1 terminal is ``\\u03c1``, the spelling the escaped control characters have), never a
    UnicodeEncodeError: ``PYTHONIOENCODING=ascii``, a Latin-1 locale or a pipe opened by a C locale change how a
    report looks, not whether the command works.  The encoding itself is kept (a UTF-8 terminal still gets UTF-8);
    files written with ``-o`` are UTF-8 whatever the terminal."""
    for stream in streams if streams is not None else (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):     # not a text stream that can be reconfigured, or closed
            pass


DEFAULT_MEMORY = 8 << 30


#: a memory bound below this loads the numeric libraries before it is set (:func:`_load_numeric_libraries`)
_PRELOAD_BELOW = 1 << 30


def _load_numeric_libraries():
    """Load numpy and scipy (their OpenBLAS allocates a buffer per thread when it is loaded) before a small memory
    bound is set: under BLR_DERIVE_MEMORY_LIMIT=150000000 or 200000000 scipy.special's OpenBLAS could not allocate
    them and spun in its retries forever (a generation killed after 90 s; 100 MB gave OpenBLAS's 'Memory
    allocation still failed' and exit 1, 250 MB a MemoryError).  Loaded first, the bound limits the derivation
    (~0.2 s more for a command that would not load them: list, families)."""
    try:
        import numpy  # noqa: F401
        import scipy.linalg  # noqa: F401
        import scipy.special  # noqa: F401
    except ImportError:  # pragma: no cover - both are dependencies
        pass


def _limit_memory():
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    try:
        limit = int(os.environ.get("BLR_DERIVE_MEMORY_LIMIT", DEFAULT_MEMORY))
    except ValueError:
        limit = DEFAULT_MEMORY
    if limit <= 0 or not hasattr(resource, "RLIMIT_DATA"):
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        if limit < _PRELOAD_BELOW:
            _load_numeric_libraries()
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        except OverflowError:
            # BLR_DERIVE_MEMORY_LIMIT=99999999999999999999999999 ended in a traceback (exit 1): a bound beyond
            # what the C call takes is beyond any address space, so it bounds nothing
            pass
        except (ValueError, OSError):  # pragma: no cover
            pass


if __name__ == "__main__":  # pragma: no cover
    entry()
