"""The name policy (blr_derive/core/names.py) against the generated modules themselves.

A declared name must not shadow a name that a generated module binds on its own (a hyperparameter called
``state`` would replace the state dict inside ``step``).  ``names.RESERVED`` lists those names; this test
recomputes them from every catalog artifact of the numpy, torch and triton targets (not jax: see
:data:`CHECKED_TARGETS`): in each scope (the module, and every function
in which names of the recipe are bound or read), every name the template binds, other than the recipe's own
symbols, internal ``_``-prefixed names and the names the engine derives from declared ones (``m_new``,
``m_list``, ``x_rows``), must be reserved.  A template that starts binding a new name fails this test until
the name is reserved or underscored.
"""
from __future__ import annotations

import ast
import builtins
import re

import pytest
import sympy as sp

from blr_derive.api import derive_record
from blr_derive.core.errors import SpecError
from blr_derive.ir.build import build_ir
from blr_derive.core.names import RESERVED, check_name, name_problem
from conftest import CATALOG, GENERATED, TARGET_NAMES

#: a subset on purpose: the jax target refuses the names its modules bind by itself, at generation (its own lists:
#: ``RESERVED`` of codegen/backends/jax/functions.py and of its ``__init__.py``, the state and transformation class
#: names), not through names.RESERVED; they are names RESERVED does not list (``jnp``, ``optax``, ``key``,
#: ``NamedTuple``, ``acc_*``, ``<Recipe>State``).  Every other target, a new one included, is checked here
CHECKED_TARGETS = tuple(t for t in TARGET_NAMES if t != "jax")
DERIVED = re.compile(r".*_(new|list|rows|all)\Z")


def _symbols(ir):
    """Every symbol name anywhere in an IR (declared and derived)."""
    out, seen = set(), set()

    def walk(x):
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, sp.Basic):
            out.update(str(s) for s in x.atoms(sp.Symbol, sp.MatrixSymbol))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple, set, frozenset)):
            for v in x:
                walk(v)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            for v in vars(x).values():
                walk(v)
    walk(ir)
    return out


def _declared(ir):
    names = {ir.class_name}
    for h in ir.hyperparameters:
        names.add(h.name)
        names.update(str(s) for s in h.symbols)
    names.update(v.name for v in ir.state)
    names.update(v.name for v in ir.data)
    if getattr(ir, "components", None):        # the component axis' index and size are declared names too
        names.update(ir.components[k] for k in ("index", "size") if k in ir.components)   # a mixture axis: no index
        names.update(ir.components.get("names", {}).values())   # the mixture axis' program, printed clash-free
    return names


class _Scopes(ast.NodeVisitor):
    """Names bound and read per scope (comprehensions are their own scope and are skipped)."""

    def __init__(self):
        self.scopes, self.stack = [], []

    def _scope(self, node, name):
        if self.stack and self.stack[-1]["name"].startswith("class "):
            name = self.stack[-1]["name"][6:] + "." + name               # a method: Class.method
        d = {"name": name, "bound": set(), "read": set()}
        self.scopes.append(d)
        self.stack.append(d)
        args = getattr(node, "args", None)
        if isinstance(args, ast.arguments):
            for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
                if a is not None:
                    d["bound"].add(a.arg)
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.stack.pop()

    def visit_Module(self, node):
        self._scope(node, "<module>")

    def visit_FunctionDef(self, node):
        self.stack[-1]["bound"].add(node.name)
        for d in node.decorator_list:
            self.visit(d)
        self._scope(node, node.name)

    def visit_ClassDef(self, node):
        self.stack[-1]["bound"].add(node.name)
        self._scope(node, f"class {node.name}")

    def visit_Lambda(self, node):
        self._scope(node, "lambda")

    def visit_ListComp(self, node):
        pass

    visit_GeneratorExp = visit_SetComp = visit_DictComp = visit_ListComp

    def visit_Name(self, node):
        self.stack[-1]["bound" if isinstance(node.ctx, (ast.Store, ast.Del)) else "read"].add(node.id)

    def visit_alias(self, node):
        self.stack[-1]["bound"].add((node.asname or node.name).split(".")[0])


def _function_texts():
    """(target, function name) -> the set of its source texts over every catalog artifact: a function with one
    text everywhere is a helper of fixed text, into which no recipe name can enter."""
    texts = {}

    for path in GENERATED.glob("*/*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                texts.setdefault((path.parent.name, node.name), set()).add(ast.dump(node))
    return texts


def _template_names():
    """name -> where a template binds it, over every catalog artifact."""
    need = {}
    texts = _function_texts()
    for recipe in sorted(CATALOG.glob("*.yaml")):
        _, D = derive_record(recipe)
        ir = build_ir(D, f"catalog/{recipe.name}")
        declared, every = _declared(ir), _symbols(ir) | _declared(ir)
        for target in CHECKED_TARGETS:
            path = GENERATED / target / f"{recipe.stem}.py"
            if not path.exists():
                continue
            v = _Scopes()
            v.visit(ast.parse(path.read_text(encoding="utf-8")))
            for sc in v.scopes:
                if sc["name"].startswith("class ") or len(texts.get((target, sc["name"].split(".")[-1]), ())) == 1:
                    continue                     # a class body, or a helper of fixed text: no recipe name enters it
                if sc["name"] != "<module>" and not (sc["bound"] | sc["read"]) & declared:
                    continue                     # a function that neither binds nor reads a declared name
                for n in sc["bound"]:
                    if n in every or n.startswith("_") or DERIVED.match(n) or n in dir(builtins):
                        continue
                    need.setdefault(n, set()).add(f"{target}:{recipe.stem}:{sc['name']}")
    return need


@pytest.mark.slow
def test_reserved_names_cover_every_name_the_templates_bind():
    need = _template_names()
    missing = {n: sorted(w)[:3] for n, w in need.items() if n not in RESERVED}
    assert not missing, f"names bound by generated modules but not reserved: {missing}"
    assert {"state", "step", "numpy", "torch", "self", "params", "hp"} <= set(need)


@pytest.mark.parametrize("name, words", [
    ("state", "reserved by the generated code"), ("numpy", "reserved"), ("lambda", "keyword"),
    ("match", "keyword"), ("sum", "builtin"), ("lambda1", "derivation's own symbols"), ("t_3", "derivation"),
    ("_hidden", "not a name"), ("ﬁ", "not a name"), ("a b", "not a name"), ("x" * 65, "at most 64"),
    ("x\n", "not a name"), ("Adam(object): pass", "not a name"),
])
def test_bad_names(name, words):
    assert words in name_problem(name)
    with pytest.raises(SpecError, match=re.escape(words)):
        check_name(name, "hyperparameter")


def test_every_name_the_audit_refuses_is_refused_where_it_is_declared():
    """A hyperparameter ``os`` once derived and was refused only by the audit of the rendered module, "the numpy
    target rendered a use of 'os' (line 167)", at the recipe's approximation; every name the audit refuses is a
    builtin, underscored or one of names.FORBIDDEN_MODULES, so it is refused at its declaration."""
    from blr_derive.codegen.inert import FORBIDDEN_NAMES
    from blr_derive.core.names import FORBIDDEN_MODULES
    assert {n for n in FORBIDDEN_NAMES if n.startswith("_") or n in dir(builtins)} | FORBIDDEN_MODULES \
        == FORBIDDEN_NAMES
    for n in FORBIDDEN_NAMES:
        assert name_problem(n) is not None, n


def test_a_module_name_is_refused_at_its_declaration(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "name: r\nfamily: gaussian_diag\nloss: abstract\nhyperparameters:\n  os: {default: 0.5}\n"
        "approximations:\n  - delta\n  - weight_decay: {coefficient: os}\n", encoding="utf-8")
    from blr_derive.api import generate
    with pytest.raises(SpecError) as ei:
        generate(tmp_path / "r.yaml", "numpy")
    assert str(ei.value) == (f"{tmp_path / 'r.yaml'}:5: hyperparameter: 'os' is a module name the generated code "
                             "may never mention; choose another name")


@pytest.mark.parametrize("name", ["lr", "weight_decay", "beta1", "m", "S", "theta", "X", "y", "u", "g2"])
def test_good_names(name):
    assert name_problem(name) is None


def test_labels_and_prefixes():
    assert name_problem("flat", "label") is None and name_problem("state", "label") is None
    assert name_problem("mu1", "prefix") is None and "reserved" in name_problem("state", "prefix")
    assert "not a name" in name_problem("a-b", "label")


@pytest.mark.parametrize("name", ["g", "H"])
def test_a_declared_name_that_the_derivation_uses_is_a_located_error(tmp_path, name):
    """A hyperparameter ``g`` next to the derivation's gradient ``g`` (the same sympy symbol) would merge the
    two quantities: it is refused at the hyperparameter's line."""
    (tmp_path / "r.yaml").write_text(
        "name: r\nfamily: gaussian_full\nloss: abstract\napproximations:\n  - delta\n"
        f"hyperparameters:\n  rho: 0.1\n  {name}: {{default: 1.0}}\nstate_init: {{}}\n", encoding="utf-8")
    from blr_derive.api import generate
    text = None
    try:
        text = generate(tmp_path / "r.yaml", "numpy")
    except SpecError as exc:
        assert f"the name '{name}' is also used by the derivation" in str(exc) and exc.line == 7
    else:                                 # an unused hyperparameter is dropped: no clash can reach the code
        assert name not in text.split("HYPERPARAMETERS")[1].split("}")[0]


def test_the_derivation_steps_aside_for_a_declared_name(tmp_path):
    """The delta method names the gradient ``g``; with a hyperparameter ``g`` in the recipe it names it ``g_``."""
    (tmp_path / "r.yaml").write_text(
        "name: r\nfamily: gaussian_diag\nloss: abstract\napproximations:\n  - delta\n"
        "  - weight_decay: {coefficient: g}\nhyperparameters:\n  rho: 0.1\n  g: {default: 1.0}\n",
        encoding="utf-8")
    from blr_derive.api import generate
    text = generate(tmp_path / "r.yaml", "numpy")
    assert 'g_ = _array("g_", oracles["grad"](m), _dims, "grad")' in text and 'g = hp["g"]' in text
