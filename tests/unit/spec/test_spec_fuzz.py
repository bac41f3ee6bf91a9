"""Principle 4 (untrusted input is data), checked by a mutation fuzzer.

Every catalog recipe (catalog/*.yaml) and every built-in family (families/*.yaml) is mutated
deterministically: each key of every mapping deleted or renamed, each value replaced by a value of
the wrong type (list, mapping, scalar, null, negative/zero/huge numbers, empty string), each string
replaced by a malformed expression (unbalanced parentheses, unknown functions, ``__import__('os')``,
attribute access, lambda, huge exponents, unicode, deep nesting) or an unknown reference (family,
block, parameter, data), list entries dropped, plus a few whole-file mutations (truncation, deep
YAML nesting, bytes that are not UTF-8).  A family is mutated through a recipe that names the
mutated family file.

Each mutant goes through the CLI in process (``blr_derive.cli.main(["FILE", "--target", "numpy",
"-o", OUT])``): the result must be success (exit 0) or exit 2 with exactly one line on stderr of the
form ``blr-derive: error: FILE:LINE: problem`` naming one of the mutant files and a line inside it,
no traceback, and the pre-existing output file untouched with nothing else left in its folder.

All mutants are enumerated (about 74,000); the test runs a fixed-seed sample of
:data:`PER_RECIPE` mutants per recipe and :data:`PER_FAMILY` per family.
``python tests/unit/spec/test_spec_fuzz.py [--per-file N] [FILE...]`` runs a larger campaign and prints every
failure (for a crash, the engine line that raised it).
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import random
import re
import signal
import sys
import traceback
from pathlib import Path

import pytest
import yaml

from conftest import ROOT  # noqa: E402
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blr_derive import cli  # noqa: E402

CATALOG = ROOT / "catalog"
FAMILIES = ROOT / "families"
SEED = 20261122
PER_RECIPE = 8           # mutants per catalog recipe in the test (fast: most fail while parsing)
PER_FAMILY = 2           # mutants per family (slower: a mutated family is derived again)
TIME_LIMIT_S = 300       # CPU seconds; a mutant that runs longer counts as a hang. A CPU-time timer
                         # (SIGVTALRM), so the engine's own wall-clock limits on sympy steps stay active

# values of the wrong type (or out of range) for any entry
WRONG_VALUES = [None, [], {}, "", "x", 0, -1, 10**18, -2.5, 1e308, True, [1, "a"], {"zz": 1}, "[["]

# malformed or hostile expressions
BAD_EXPRESSIONS = [
    "(theta + 1", "theta + 1)", "nosuchfn(theta)", "__import__('os').system('true')",
    "theta.__class__", "(lambda: 1)()", "2**99999999", "(10**64)**64", "factorial(10**6)",
    "gamma(10**7)", "lgamma(99999999)", "θ + 1", "(" * 300 + "1" + ")" * 300, "-" * 1990 + "1",
    "1e999", "'abc'", "[1, 2]", "theta if theta else 1", "theta[0]", "theta = 1", "sum(theta)", "sum()",
    "log()", "log(1, 2)", "eye(-1)", "polygamma(99, theta)", "lmvgamma(theta, 10**9)", "9" * 1999,
    "theta**theta**theta**theta", "theta @ theta", "theta == 1", "not theta", "x.T.T.T", "tr(eye(P))",
    "exp(exp(exp(exp(exp(1000)))))", "1/0", "0**-1", "sqrt(-1)", "zz_unknown", "",
]

WHOLE_FILE = {
    "truncated": lambda t: t[: len(t) // 2],
    "deep_nesting": lambda t: t + "\nzz_deep: " + "[" * 5000 + "]" * 5000 + "\n",
    "not_utf8": lambda t: t.encode("utf-8") + b"\nzz: \xff\xfe\n",
    "tabs": lambda t: t.replace("  ", "\t", 3),
    "empty": lambda t: "",
    "scalar": lambda t: "just a string\n",
    "anchor": lambda t: t + "\nzz_a: &a {k: 1}\nzz_b: *a\n",
    "python_tag": lambda t: t + "\nzz: !!python/object/apply:os.system ['true']\n",
}


# ---------------------------------------------------------------------------- mutations
def _paths(doc, prefix=()):
    """Every (path, value) below the root, mappings and lists alike."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,), v
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,), v
            yield from _paths(v, prefix + (i,))


def _parent(doc, path):
    for k in path[:-1]:
        doc = doc[k]
    return doc


def _with(doc, path, fn):
    new = copy.deepcopy(doc)
    fn(_parent(new, path), path[-1])
    return new


def _set(value):
    def fn(parent, key):
        parent[key] = copy.deepcopy(value)
    return fn


def _delete(parent, key):
    del parent[key]


def _rename(parent, key):
    items = list(parent.items())
    parent.clear()
    for k, v in items:
        parent["zz_unknown" if k == key else k] = v


def mutations(doc):
    """(label, make) for every structural mutation of a YAML document, in a fixed order: ``make()`` returns the
    mutated document (a fresh copy).  Only the sampled mutants are built: copying the document for each of the
    ~160,000 candidates took ~11 s of CPU, for the ~660 the test runs."""
    def later(path, fn):
        return lambda: _with(doc, path, fn)
    for path, value in _paths(doc):
        p = "/".join(map(str, path))
        parent = _parent(doc, path)
        if isinstance(parent, (dict, list)):
            yield f"delete {p}", later(path, _delete)
        if isinstance(parent, dict):
            yield f"rename {p}", later(path, _rename)
        for w in WRONG_VALUES:
            if w != value or type(w) is not type(value):
                yield f"set {p} = {w!r}", later(path, _set(w))
        if isinstance(value, str):
            for e in BAD_EXPRESSIONS:
                yield f"expr {p} = {e[:40]!r}", later(path, _set(e))
            if value.isidentifier():
                yield f"ref {p} -> zz_unknown", later(path, _set("zz_unknown"))
            yield f"append {p}", later(path, _set(value + " + zz_unknown"))
        if isinstance(value, list) and value:
            yield f"truncate {p}", later(path, _set(value[:-1]))
            yield f"double {p}", later(path, _set(value + value))


# ---------------------------------------------------------------------------- subjects
def _family_recipes():
    """family name -> (recipe document, path inside it that names the family)."""
    out = {}
    for r in sorted(CATALOG.glob("*.yaml")):
        doc = yaml.safe_load(r.read_text(encoding="utf-8"))
        fam = doc.get("family")
        if isinstance(fam, str) and fam not in out:
            out[fam] = (doc, ("family",))
        elif isinstance(fam, dict) and isinstance(fam.get("mixture"), str) and fam["mixture"] not in out:
            out[fam["mixture"]] = (doc, ("family", "mixture"))
    return out


def _minimal_recipe(name):
    return ({"name": "fuzz", "family": name, "loss": "abstract", "approximations": ["delta"],
             "hyperparameters": {"rho": {"default": 0.1}}}, ("family",))


def subjects():
    """(label, kind, source path) for every file the fuzzer mutates."""
    out = [(p.name, "recipe", p) for p in sorted(CATALOG.glob("*.yaml"))]
    out += [(p.name, "family", p) for p in sorted(FAMILIES.glob("*.yaml"))]
    return out


def all_mutants(kind, path):
    """(label, make) for one file: structural mutants first, then whole-file ones; ``make()`` builds the mutant
    (text or document)."""
    text = path.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    muts = list(mutations(doc))
    muts += [(f"file {k}", lambda fn=fn: fn(text)) for k, fn in WHOLE_FILE.items()]
    return muts


def sample(muts, n, key):
    if n is None or len(muts) <= n:
        return list(muts)
    rng = random.Random(f"{SEED}:{key}")
    idx = sorted(rng.sample(range(len(muts)), n))
    return [muts[i] for i in idx]


def _dump(doc):
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**6)


# ---------------------------------------------------------------------------- running one mutant
class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


SENTINEL = "# pre-existing output: must stay untouched\n"
ERROR_LINE = re.compile(r"^blr-derive: error: (?P<file>.+?):(?P<line>\d+): \S.*$")


def run_mutant(kind, path, label, mutant, workdir: Path, family_recipes):
    """Write the mutant, run the CLI in process and return None (fine) or a failure description."""
    for p in workdir.iterdir():
        p.unlink()
    data = mutant if isinstance(mutant, (str, bytes)) else _dump(mutant)
    mode = "wb" if isinstance(data, bytes) else "w"
    files = []
    if kind == "recipe":
        recipe = workdir / "mutant_recipe.yaml"
        with open(recipe, mode) as fh:
            fh.write(data)
        files.append(recipe)
    else:
        fam_name = path.stem
        fam = workdir / f"mutant_{fam_name}.yaml"
        with open(fam, mode) as fh:
            fh.write(data)
        doc, fpath = family_recipes.get(fam_name) or _minimal_recipe(fam_name)
        doc = copy.deepcopy(doc)
        _parent(doc, fpath)[fpath[-1]] = str(fam)
        recipe = workdir / "recipe.yaml"
        recipe.write_text(_dump(doc), encoding="utf-8")
        files += [fam, recipe]
    out = workdir / "out.py"
    out.write_text(SENTINEL, encoding="utf-8")
    before = sorted(p.name for p in workdir.iterdir())
    err, stdout = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGVTALRM, _alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, TIME_LIMIT_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
            try:
                rc = cli.main([str(recipe), "--target", "numpy", "-o", str(out)])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
    except Hang:
        return f"hang (> {TIME_LIMIT_S} s)"
    except BaseException as exc:  # noqa: BLE001 - an escaped exception is the failure we report
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "site-packages" not in f.filename]
        at = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        return f"crash at {at}: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)
    msg = err.getvalue()
    after = sorted(p.name for p in workdir.iterdir())
    if after != before:
        return f"files left behind: {sorted(set(after) - set(before))} (rc {rc}, stderr {msg!r})"
    if rc == 0:
        if msg:
            return f"exit 0 with stderr {msg!r}"
        if out.read_text(encoding="utf-8") == SENTINEL:
            return "exit 0 without writing the output file"
        return None
    if rc != 2:
        return f"exit status {rc} (stderr {msg!r})"
    if out.read_text(encoding="utf-8") != SENTINEL:
        return "output file changed on an error"
    if "Traceback" in msg or msg.count("\n") != 1 or not msg.endswith("\n"):
        return f"not one line: {msg!r}"
    m = ERROR_LINE.match(msg.rstrip("\n"))
    if not m:
        return f"no FILE:LINE: in {msg!r}"
    named = Path(m["file"])
    if named not in files:
        return f"names {m['file']}, not one of the mutant files: {msg!r}"
    nlines = len(named.read_bytes().splitlines()) or 1
    if not 1 <= int(m["line"]) <= nlines + 1:
        return f"line {m['line']} outside the file ({nlines} lines): {msg!r}"
    return None


# ---------------------------------------------------------------------------- the test
def _cases():
    for label, kind, path in subjects():
        n = PER_RECIPE if kind == "recipe" else PER_FAMILY
        for mlabel, make in sample(all_mutants(kind, path), n, label):
            yield label, kind, path, mlabel, make()


@pytest.mark.slow
def test_mutants_fail_cleanly(tmp_path, capsys):
    fr = _family_recipes()
    failures, n, ok = [], 0, 0
    for label, kind, path, mlabel, mutant in _cases():
        n += 1
        problem = run_mutant(kind, path, mlabel, mutant, tmp_path, fr)
        if problem:
            failures.append(f"{label} [{mlabel}]: {problem.splitlines()[0]}")
        elif (tmp_path / "out.py").read_text(encoding="utf-8") != SENTINEL:
            ok += 1
    with capsys.disabled():
        print(f"\nspec fuzz: {n} mutants ({ok} still valid, {n - ok - len(failures)} located errors), "
              f"{len(failures)} misbehave")
    assert n >= 300
    assert not failures, f"{len(failures)} of {n} mutants misbehave:\n" + "\n".join(failures[:40])


@pytest.mark.slow
def test_mutants_reach_derivation(tmp_path):
    """The harness really derives: unmutated files succeed, and a mutant that only drops an optional
    description also succeeds (exit 0, output written)."""
    fr = _family_recipes()
    for kind, path in (("recipe", CATALOG / "adam.yaml"), ("family", FAMILIES / "gaussian_diag.yaml"),
                       ("recipe", CATALOG / "em_gmm.yaml"), ("recipe", CATALOG / "dropout_sgd.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert run_mutant(kind, path, "identity", doc, tmp_path, fr) is None
        assert (tmp_path / "out.py").read_text(encoding="utf-8").startswith("# ")
        del doc["description"]
        assert run_mutant(kind, path, "no description", doc, tmp_path, fr) is None


@pytest.mark.parametrize("text, words", [
    ("(theta + 1)**64", "degree exceeds 32"), ("((theta + 1)**64)**64", "degree exceeds 32"),
    ("1/0", "not a finite real"), ("sqrt(-1)", "not a finite real"), ("exp(exp(exp(1000)))", "not a finite real"),
    ("(10**64)**64", "not a finite real"),
    ("lgamma(99999999)", "larger than 200"), ("factorial(10**6)", "larger than 200"),
    ("-" * 1990 + "1", "nested too deeply"),
])
def test_expression_bounds(text, words):
    """Constants, special-function arguments, degree and nesting are bounded before any derivation runs
    (each of these hung, ran out of memory or crashed before the bound)."""
    import sympy as sp

    from blr_derive.core.errors import SpecError
    from blr_derive.core.exprparse import parse_expression
    with pytest.raises(SpecError, match=re.escape(words)):
        parse_expression(text, {"theta": sp.Symbol("theta", real=True)})


def test_internal_error_is_one_line_status_3(tmp_path, monkeypatch, capsys):
    """An exception that is not a SpecError is an engine bug: one line, exit status 3, output untouched
    (README, "Safety model"); BLR_DERIVE_TRACEBACK=1 re-raises it."""
    from blr_derive import api

    def boom(*a, **k):
        raise ZeroDivisionError("simulated\nengine bug")
    monkeypatch.setattr(api, "generate", boom)
    monkeypatch.delenv("BLR_DERIVE_TRACEBACK", raising=False)
    out = tmp_path / "out.py"
    out.write_text(SENTINEL, encoding="utf-8")
    assert cli.main([str(CATALOG / "sgd.yaml"), "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("blr-derive: internal error: ZeroDivisionError: simulated engine bug")
    assert "report" in err
    assert out.read_text(encoding="utf-8") == SENTINEL and sorted(p.name for p in tmp_path.iterdir()) == ["out.py"]
    monkeypatch.setenv("BLR_DERIVE_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main([str(CATALOG / "sgd.yaml"), "-o", str(out)])


# ---------------------------------------------------------------------------- campaign
def main(argv=None):
    import argparse
    import tempfile
    import time
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-file", type=int, default=None, help="mutants per file (default: all)")
    ap.add_argument("--seed", help="sample seed (default: the test's)")
    ap.add_argument("only", nargs="*", help="file names (e.g. adam.yaml) to mutate")
    args = ap.parse_args(argv)
    global SEED
    SEED = args.seed or SEED
    os.environ["BLR_DERIVE_TRACEBACK"] = "1"
    fr = _family_recipes()
    n, bad, t0 = 0, 0, time.time()
    with tempfile.TemporaryDirectory() as d:
        for label, kind, path in subjects():
            if args.only and label not in args.only:
                continue
            t1 = time.time()
            for mlabel, make in sample(all_mutants(kind, path), args.per_file, label):
                mutant = make()
                n += 1
                problem = run_mutant(kind, path, mlabel, mutant, Path(d), fr)
                if problem:
                    bad += 1
                    print(f"FAIL {label} [{mlabel}]: {problem}", flush=True)
            print(f"# {label}: {time.time() - t1:.1f} s", flush=True)
    print(f"# {n} mutants, {bad} failures, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
