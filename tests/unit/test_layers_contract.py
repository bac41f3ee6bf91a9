"""The import-layering contract (issue 14, principle 7): data flows spec → families → rules → candidates →
derive → IR → codegen, and a module never imports from a layer above its own.

Layers, lowest first; a module may import its own layer and the layers below it:

    core < spec < families < rules < candidates < derive < ir < codegen < verify < report < runtime < api < testing
    < cli

Also: no import cycle between modules, and no function-local import of the engine's own modules (imports are
at the top of a module, where the layering can be read) — with one stated exception: the command line imports
the API when a command runs (:data:`LAZY`), so that ``--help``, ``--version`` and command-line errors answer
without importing sympy (0.14 s instead of 1.0 s per process), and the same for ``blr-derive verify`` and the
pytest plugin of :mod:`blr_derive.testing`, which pytest loads in every run of every project where blr-derive is
installed; nothing imports the CLI or the plugin, so this cannot hide a cycle.  Likewise the optax side of
:mod:`blr_derive.testing` is imported only when an optax transformation is checked (jax and optax are optional),
and the API imports the numeric checks (scipy, 0.4 s) only when ``check_file`` is asked for.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: (module, what it may import inside a function) — see the module docstring
LAZY = {("blr_derive.cli", "blr_derive.api"), ("blr_derive.cli", "blr_derive.testing"),
        ("blr_derive.cli.checks", "blr_derive.api"), ("blr_derive.cli.checks", "blr_derive.testing"),
        ("blr_derive.testing.plugin", "blr_derive.testing"),
        ("blr_derive.testing.compare", "blr_derive.testing.optax_side"),
        ("blr_derive.api", "blr_derive.verify")}
LAYERS = ["core", "spec", "families", "rules", "candidates", "derive", "ir", "codegen", "verify", "report",
          "runtime", "api", "testing", "cli"]


def _modules():
    """dotted name -> (path, source tree) for every module of blr_derive and codegen."""
    out = {}
    for base, prefix in ((ROOT / "blr_derive", "blr_derive"), (ROOT / "codegen", "blr_derive.codegen")):
        for p in base.rglob("*.py"):
            if "assets" in p.parts:
                continue
            rel = p.relative_to(base).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            out[".".join([prefix] + parts)] = (p, ast.parse(p.read_text(encoding="utf-8")))
    return out


def layer_of(module: str):
    parts = module.split(".")
    if len(parts) == 1:
        return None                                   # blr_derive/__init__.py
    name = parts[1]
    if name in ("__main__",):
        return "cli"
    return name if name in LAYERS else None


def _imports(module, path, tree):
    """(imported module, line, inside a function) for every import of blr_derive."""
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    local = {id(x) for f in funcs for x in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n.startswith("blr_derive"):
                yield n, node.lineno, id(node) in local


def test_no_module_imports_a_higher_layer():
    mods = _modules()
    bad = []
    for m, (path, tree) in mods.items():
        lm = layer_of(m)
        for imp, line, _ in _imports(m, path, tree):
            li = layer_of(imp)
            if lm is None or li is None or imp not in mods and not any(k.startswith(imp + ".") for k in mods):
                continue
            if LAYERS.index(li) > LAYERS.index(lm):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {m} ({lm}) imports {imp} ({li})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(set(bad)))


def test_no_function_local_imports_of_the_engine():
    bad = []
    for m, (path, tree) in _modules().items():
        for imp, line, local in _imports(m, path, tree):
            if local and not any(m == a and (imp == b or imp.startswith(b + ".")) for a, b in LAZY):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {imp}")
    assert not bad, "function-local imports:\n" + "\n".join(sorted(set(bad)))


def test_no_import_cycles():
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, (path, tree) in mods.items():
        for imp, _, _ in _imports(m, path, tree):
            target = imp if imp in mods else imp.rsplit(".", 1)[0]
            if target in mods and target != m and not m.startswith(target + "."):
                graph[m].add(target)
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v, counter=[0]):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_every_package_is_a_known_layer():
    names = {p.name for p in (ROOT / "blr_derive").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert names - {"data"} <= set(LAYERS), names - set(LAYERS)
