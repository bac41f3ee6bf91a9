"""Principle 4 end to end: recipe text never becomes code in a generated module.

Payloads that try every way out of a comment, a docstring, a string literal or a jinja2 template (newlines,
carriage returns, Unicode line and paragraph separators, NUL and other control characters, triple quotes,
trailing backslashes, ``}}``/``{%``, very long text) are written into the string fields of every catalog
recipe and every built-in family, and into a recipe's file name.  Each payload carries code that, if it ever
ran, would create a *canary* file.  Every mutant is derived and generated for every target; each module that
is generated is then imported in a subprocess, and the test fails if any canary exists.

* **prose** fields (title, description, paper, checked_against, reference, every ``description``) are
  poisoned all at once, one payload per field (rotated over rounds): the recipe must still generate, and the
  module must import without running anything;
* **names and expressions** (every other string, and every mapping key) are replaced one at a time: each
  mutant must either generate an inert module or be refused with one located line (exit 2).

The test runs all payload rounds for a few recipes and families and one round for every other file, plus a
fixed-seed sample of the name and key mutants; ``python tests/unit/cli/test_injection_fuzz.py`` runs every round and
every mutant.
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import io
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import ROOT  # noqa: E402
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blr_derive import cli  # noqa: E402
from blr_derive.codegen import TARGET_NAMES  # noqa: E402

CATALOG = ROOT / "catalog"
FAMILIES = ROOT / "families"
PROSE_KEYS = {"title", "description", "paper", "checked_against", "reference"}
#: files that get every payload round in the test (the others get one round)
FULL = {"adam.yaml", "ivon.yaml", "newton.yaml", "em_gmm.yaml", "bayesbinn.yaml", "fed_admm_full.yaml",
        "gaussian_diag.yaml", "bernoulli_logit.yaml"}
SEED = 20261123
NAME_SAMPLE = 6          # name/expression/key mutants per file in the test


def payloads(code: str) -> list[str]:
    """Strings that try to end a comment, a docstring, a string literal or a template tag, then run ``code``."""
    return [
        f"x\n{code}\n#",
        f"x\r{code}\r#",
        f"x\r\n{code}\r\n#",
        f"x\u2028{code}\u2029#",
        f"x\x0b\x0c\x1c\x1d\x1e\x85{code}",
        f'x"""\n{code}\n"""',
        f"x'''\n{code}\n'''",
        f'x"\n{code}\n"',
        "x\\",
        f"x\\\n{code}",
        f"}}}}\n{code}\n{{{{ 1 }}}}{{% raw %}}{{%",
        f"{{{{ ir }}}}{{% for a in b %}}\n{code}\n{{% endfor %}}",
        f"x\x00\n{code}",
        "A" * 3000 + f"\n{code}",
        code,
    ]


def _code(canary: Path) -> str:
    return f"__import__('pathlib').Path({str(canary)!r}).write_text('pwned')"


def _paths(doc, prefix=()):
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


def _dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**6)


def _is_load_only(path: Path) -> bool:
    """A family file that no catalog recipe uses and whose minimal recipe needs a prior (:func:`load_only`)."""
    return path.stem not in _family_recipes() and load_only(path)


def prose_paths(doc):
    return [p for p, v in _paths(doc) if isinstance(v, str) and isinstance(p[-1], str) and p[-1] in PROSE_KEYS]


def other_string_paths(doc):
    return [p for p, v in _paths(doc) if isinstance(v, str) and not (isinstance(p[-1], str) and p[-1] in PROSE_KEYS)]


def key_paths(doc):
    return [p for p, _ in _paths(doc) if isinstance(p[-1], str)]


@functools.lru_cache(maxsize=None)
def _family_recipes():
    out = {}
    for r in sorted(CATALOG.glob("*.yaml")):
        doc = yaml.safe_load(r.read_text(encoding="utf-8"))
        fam = doc.get("family")
        if isinstance(fam, str) and fam not in out:
            out[fam] = (doc, ("family",))
        elif isinstance(fam, dict) and isinstance(fam.get("mixture"), str) and fam["mixture"] not in out:
            out[fam["mixture"]] = (doc, ("family", "mixture"))
    return out


def _minimal_loss(family_path: Path) -> str:
    """A loss for a family no catalog recipe uses, computed from the family itself (so that a new family file needs
    no entry here): its first scalar sufficient statistic (linear in μ, so ``exact`` derives it); a family whose
    statistics are all vectors or matrices gets the trace of its first square one (or of sᵀs for a vector s)."""
    import sympy as sp
    from blr_derive.families.library import load_family
    stats = list(load_family(str(family_path)).T)
    scalar = [t for t in stats if getattr(t, "shape", None) is None]
    if scalar:
        loss = scalar[0]
    else:
        square = [t for t in stats if t.shape[0] == t.shape[1]]
        loss = sp.Trace(square[0]) if square else sp.Trace(stats[0].T * stats[0])
    # sympy's spelling of the restricted grammar's functions
    return str(loss).replace("Trace(", "tr(").replace("Abs(", "abs(").replace("Determinant(", "det(")


def _minimal_recipe(family_path: Path):
    return ({"name": "fuzz", "family": str(family_path), "loss": {"expression": _minimal_loss(family_path)},
             "approximations": ["exact"]}, ("family",))


#: the refusal that makes a family load-only: E_q[log h] of the Poisson, negative binomial and logarithmic needs a
#: prior in the family (or −log h in the loss), which a minimal recipe does not have
NEEDS_PRIOR = "E_q[log h] has no closed form the BLR can use"


@functools.lru_cache(maxsize=None)
def load_only(family_path: Path) -> bool:
    """Whether a family without a catalog recipe can only be loaded: its clean minimal recipe is refused for the
    one stated reason (:data:`NEEDS_PRIOR`); any other refusal is a failure of the test's recipe, reported."""
    import tempfile
    from blr_derive.api import derive_record
    from blr_derive.core.errors import SpecError
    with tempfile.TemporaryDirectory() as d:
        recipe = Path(d) / "minimal.yaml"
        recipe.write_text(_dump(_minimal_recipe(family_path)[0]), encoding="utf-8")
        try:
            derive_record(str(recipe))
        except SpecError as exc:
            if NEEDS_PRIOR in str(exc):
                return True
            raise AssertionError(f"{family_path.name}: the minimal recipe does not derive: {exc}") from None
    return False


# ---------------------------------------------------------------------------- one mutant
def write_mutant(kind, path, doc, workdir: Path, recipe_name="recipe.yaml"):
    """Write a mutated document (a recipe, or a family plus a recipe that uses it); returns the recipe path."""
    if kind == "recipe":
        recipe = workdir / recipe_name
        recipe.write_text(_dump(doc), encoding="utf-8")
        return recipe
    fam = workdir / f"mutant_{path.stem}.yaml"
    fam.write_text(_dump(doc), encoding="utf-8")
    rdoc, fpath = _family_recipes().get(path.stem) or _minimal_recipe(path)
    rdoc = copy.deepcopy(rdoc)
    _parent(rdoc, fpath)[fpath[-1]] = str(fam)
    recipe = workdir / recipe_name
    recipe.write_text(_dump(rdoc), encoding="utf-8")
    return recipe


@contextlib.contextmanager
def derived_once():
    """Within the block, the engine derives a recipe and builds its update IR once for all targets, as
    ``blr-derive catalog`` does: the first target's CLI run derives (or fails), the others reuse that result (or
    that failure).  The mutant's files do not change within one :func:`generate_all`, so each target still
    renders exactly what ``blr-derive MUTANT --target T`` would; only the repeated derivation is saved."""
    from blr_derive import api
    derived, built = {}, {}
    real_derived, real_build = api._derived, api.build_ir

    def once(memo, key, fn, *args):
        if key not in memo:
            try:
                memo[key] = (True, fn(*args))
            except Exception as exc:      # noqa: BLE001 - the same failure for every target
                memo[key] = (False, exc)
        ok, value = memo[key]
        if not ok:
            raise value
        return value

    api._derived = lambda recipe, file=None: once(derived, (recipe.file, file), real_derived, recipe, file)
    api.build_ir = lambda D, label, *rest: once(built, (id(D), label), real_build, D, label, *rest)
    try:
        yield
    finally:
        api._derived, api.build_ir = real_derived, real_build


def generate_all(recipe: Path, outdir: Path, tag: str):
    """Run the CLI in process for every target; returns ({target: exit status}, [generated module paths],
    [problems], {target: stderr}).  Exit 0 must write a module; exit 2 must be one located line; nothing else is
    allowed.  The recipe is derived once for every target (:func:`derived_once`)."""
    with derived_once():
        return _generate_all(recipe, outdir, tag)


def _generate_all(recipe, outdir, tag):
    codes, modules, problems, messages = {}, [], [], {}
    for t in TARGET_NAMES:
        out = outdir / f"gen_{tag}_{t}.py"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main([str(recipe), "--target", t, "-o", str(out)])
        codes[t] = rc
        msg = messages[t] = err.getvalue()
        if rc == 0:
            if not out.exists():
                problems.append(f"{t}: exit 0 without output")
            else:
                modules.append(out)
        elif rc == 2:
            if msg.count("\n") != 1 or "Traceback" in msg or not msg.startswith("blr-derive: error: "):
                problems.append(f"{t}: not one located line: {msg[:300]!r}")
            elif any(c in msg[:-1] for c in "\r\x00\x0b\x0c\u2028\u2029\x85"):
                problems.append(f"{t}: control characters in the error line: {msg[:300]!r}")
        else:
            problems.append(f"{t}: exit status {rc}: {msg[:300]!r}")
    return codes, modules, problems, messages


IMPORTER = textwrap.dedent("""
    import importlib.util, json, os, sys
    # one request per line on stdin: {"cwd": folder, "paths": [module, ...]}; one reply per request on the
    # original stdout: {"n": modules, "failed": ["IMPORT-FAILED path: error", ...]}.  What a module prints goes to
    # stderr, never into a reply.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    count = 0
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        failed = []
        for path in request["paths"]:
            count += 1
            spec = importlib.util.spec_from_file_location(f"_injected_{count}", path)
            mod = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(mod)
            except BaseException as exc:      # an import that fails (or exits) is reported, never silent
                failed.append(f"IMPORT-FAILED {path}: {type(exc).__name__}: {exc}")
            del mod
        reply.write(json.dumps({"n": len(request["paths"]), "failed": failed}) + "\\n")
        reply.flush()
""")


class Importer:
    """One importer process per test process (pytest-xdist worker), started when first needed and reused by every
    file's :func:`import_all`: each generated module is still imported in a process of its own, away from the
    test's, with ``TRITON_INTERPRET=1``, by ``exec_module`` of its file (top-level code runs as in a fresh
    interpreter), but torch, jax and triton are imported once per worker instead of once per file (~4 s each).
    A process that dies (a module that kills it) is reported as a problem, and the next request starts a new one."""
    proc = None
    log = None

    @classmethod
    def request(cls, modules, cwd: Path, timeout=600):
        import json
        import selectors
        import tempfile
        if cls.proc is None or cls.proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
            cls.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            cls.proc = subprocess.Popen([sys.executable, "-c", IMPORTER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=cls.log, text=True, env=env, cwd=str(cwd))
            atexit.register(cls.close, cls.proc)
        proc = cls.proc
        try:
            proc.stdin.write(json.dumps({"cwd": str(cwd), "paths": list(map(str, modules))}) + "\n")
            proc.stdin.flush()
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                line = proc.stdout.readline() if sel.select(timeout) else ""
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            return json.loads(line)["failed"]
        proc.kill()
        rc = proc.wait()
        cls.log.seek(0)
        tail = cls.log.read()[-500:]
        cls.proc = None
        return [f"importer exit {rc}: {tail}"]

    @staticmethod
    def close(proc):
        """The end of input ends the importer's loop (at the test process's exit)."""
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def import_all(modules, canaries: Path):
    """Import every module in the importer process (:class:`Importer`, run in ``canaries``); returns (problems,
    canaries that exist)."""
    if not modules:
        return [], []
    problems = Importer.request(modules, canaries)
    return problems, sorted(p.name for p in canaries.iterdir())


# ---------------------------------------------------------------------------- mutants
def prose_round(doc, canaries: Path, rnd: int, label: str):
    """The document with every prose field poisoned (payload index rotated by ``rnd``).  In a sized document
    text is a template (``{K}`` is replaced), so the payload's braces are written as the template's literal
    braces ``{{``/``}}``: it arrives in the expanded text as it is."""
    new = copy.deepcopy(doc)
    sized = isinstance(doc, dict) and "sizes" in doc
    for i, p in enumerate(prose_paths(doc)):
        canary = canaries / f"{label}.prose{i}.r{rnd}"
        pl = payloads(_code(canary))[(i + rnd) % len(payloads("x"))]
        if sized:
            pl = pl.replace("{", "{{").replace("}", "}}")
        parent = _parent(new, p)
        parent[p[-1]] = parent[p[-1]] + " " + pl
    return new


def name_mutants(doc, canaries: Path, label: str):
    """(description, make) with one name, expression or key replaced by a payload; ``make()`` builds the mutated
    document (a fresh copy), so that only the sampled mutants are copied (~75,000 candidates over the files, 6
    sampled per file: ~4 s of CPU)."""
    def value_mutant(p, pl):
        def make():
            new = copy.deepcopy(doc)
            _parent(new, p)[p[-1]] = pl
            return new
        return make

    def key_mutant(p, pl):
        def make():
            new = copy.deepcopy(doc)
            parent = _parent(new, p)
            items = list(parent.items())
            parent.clear()
            for key, v in items:
                parent[pl if key == p[-1] else key] = v
            return new
        return make

    out = []
    for j, p in enumerate(other_string_paths(doc)):
        for k, pl in enumerate(payloads(_code(canaries / f"{label}.value{j}"))):
            out.append((f"value {'/'.join(map(str, p))} <- payload {k}", value_mutant(p, pl)))
    for j, p in enumerate(key_paths(doc)):
        for k, pl in enumerate(payloads(_code(canaries / f"{label}.key{j}"))):
            out.append((f"key {'/'.join(map(str, p))} <- payload {k}", key_mutant(p, pl)))
    return out


def load_family_mutant(path, doc, d):
    """A family no recipe derives with: the mutant loads, or is refused with a located SpecError."""
    from blr_derive.api import family
    from blr_derive.core.errors import SpecError
    fam_file = d / f"{path.stem}.yaml"
    fam_file.write_text(_dump(doc), encoding="utf-8")
    try:
        family(str(fam_file))
    except SpecError as exc:
        if exc.file is None or exc.line is None:
            return [f"unlocated error {str(exc)[:200]!r}"]
    except Exception as exc:  # noqa: BLE001 - the failure reported
        return [f"crash {type(exc).__name__}: {str(exc)[:200]}"]
    return []


def subjects():
    return ([("recipe", p) for p in sorted(CATALOG.glob("*.yaml"))]
            + [("family", p) for p in sorted(FAMILIES.glob("*.yaml"))])


def run_file(kind, path: Path, work: Path, rounds, name_sample):
    """All checks for one file; returns a list of problems (empty: the file passed)."""
    canaries = work / "canaries"
    canaries.mkdir(exist_ok=True)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    label = path.stem
    problems, modules = [], []
    for rnd in rounds:
        d = work / f"prose{rnd}"
        d.mkdir()
        if kind == "family" and _is_load_only(path):
            mutant = prose_round(doc, canaries, rnd, label)
            problems += [f"prose round {rnd}: {p}" for p in load_family_mutant(path, mutant, d)]
            continue
        recipe = write_mutant(kind, path, prose_round(doc, canaries, rnd, label), d)
        codes, mods, probs, messages = generate_all(recipe, d, f"p{rnd}")
        problems += [f"prose round {rnd}: {p}" for p in probs]
        if codes["numpy"] != 0:
            problems.append(f"prose round {rnd}: poisoned prose must not change the derivation (numpy exit "
                            f"{codes['numpy']}: {messages['numpy']})")
        modules += mods
    muts = name_mutants(doc, canaries, label)
    if name_sample is not None and len(muts) > name_sample:
        rng = random.Random(f"{SEED}:{label}")
        muts = [muts[i] for i in sorted(rng.sample(range(len(muts)), name_sample))]
    for j, (what, make) in enumerate(muts):
        m = make()
        d = work / f"name{j}"
        d.mkdir()
        if kind == "family" and _is_load_only(path):
            problems += [f"{what}: {p}" for p in load_family_mutant(path, m, d)]
            continue
        recipe = write_mutant(kind, path, m, d)
        _, mods, probs, _ = generate_all(recipe, d, f"n{j}")
        problems += [f"{what}: {p}" for p in probs]
        modules += mods
    probs, fired = import_all(modules, canaries)
    problems += probs
    problems += [f"CANARY {c}: a payload ran when a generated module was imported" for c in fired]
    return problems


@pytest.mark.parametrize("kind, path", subjects(), ids=[p.name for _, p in subjects()])
def test_payloads_stay_inert(kind, path, tmp_path):
    n = len(payloads("x"))
    rounds = range(n) if path.name in FULL else [sum(map(ord, path.name)) % n]
    problems = run_file(kind, path, tmp_path, rounds, NAME_SAMPLE)
    assert not problems, "\n".join(problems[:30])


def test_payload_in_the_recipe_file_name(tmp_path):
    """The source path is written into the generated header: a file name with a newline stays a comment."""
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    name = "adam\n" + _code(Path("filename")) + "\n#.yaml"           # relative: the importer runs in canaries/
    recipe = tmp_path / name
    recipe.write_text((CATALOG / "adam.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    codes, mods, probs, _ = generate_all(recipe, tmp_path, "fname")
    assert not probs and codes == dict.fromkeys(TARGET_NAMES, 0)
    header = mods[0].read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("# Generated by blr-derive") and "\\n__import__" in header
    problems, fired = import_all(mods, canaries)
    assert not problems and not fired


def test_unpaired_surrogates_are_refused_where_they_are(tmp_path):
    """Text that is not valid Unicode (an unpaired surrogate, written as a YAML escape) is refused when the file
    is read: one located line, every target (no UnicodeEncodeError on the way to the output file)."""
    doc = yaml.safe_load((CATALOG / "adam.yaml").read_text(encoding="utf-8"))
    doc["title"] += "\ud800"
    recipe = write_mutant("recipe", CATALOG / "adam.yaml", doc, tmp_path)
    codes, mods, probs, messages = generate_all(recipe, tmp_path, "sur")
    assert not probs and not mods and set(codes.values()) == {2}
    line = next(i for i, t in enumerate(recipe.read_text(encoding="utf-8").splitlines(), 1) if t.startswith("title"))
    assert all(f"recipe.yaml:{line}: a string holds an unpaired surrogate" in m for m in messages.values())


NEW_FAMILY = """\
name: half_normal_fuzz
description: Half-normal with scale sigma on (0, inf), T = theta^2, h = 1 (a family the library does not ship).
reference: "Sec. 1.2 (exponential family, Eq. 3)"
variable: theta
support: positive
parameters:
  sigma: {domain: positive, description: scale}
sufficient_statistics:
  - theta**2
base_measure: "1"
natural_parameters:
  - -1/(2*sigma**2)
"""


def test_a_new_family_file_needs_no_edit_here(tmp_path):
    """Discovery: a family file the library does not ship (no catalog recipe, no entry in any list of this test)
    gets a computed minimal recipe and goes through a payload round and name mutants like a built-in one."""
    fam = tmp_path / "half_normal_fuzz.yaml"
    fam.write_text(NEW_FAMILY, encoding="utf-8")
    assert fam.stem not in _family_recipes() and not load_only(fam)
    assert _minimal_loss(fam) == "theta**2"
    work = tmp_path / "work"
    work.mkdir()
    assert run_file("family", fam, work, [0], 2) == []


def test_the_harness_detects_a_payload_that_runs(tmp_path):
    """The canary mechanism works: a module that does run the payload is caught."""
    canaries = tmp_path / "canaries"
    canaries.mkdir()
    bad = tmp_path / "bad.py"
    bad.write_text(_code(canaries / "direct") + "\n", encoding="utf-8")
    problems, fired = import_all([bad], canaries)
    assert fired == ["direct"]


def main():
    import tempfile
    import time
    n = len(payloads("x"))
    t0, bad = time.time(), 0
    for kind, path in subjects():
        with tempfile.TemporaryDirectory() as d:
            t1 = time.time()
            problems = run_file(kind, path, Path(d), range(n), None)
            bad += len(problems)
            for p in problems:
                print(f"FAIL {path.name}: {p}", flush=True)
            print(f"# {path.name}: {time.time() - t1:.1f} s, {len(problems)} problems", flush=True)
    print(f"# {bad} problems, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
