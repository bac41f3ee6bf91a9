"""The arguments each rule reads from a recipe, found in its source (``docs/recipes.md``).

Rules read their arguments imperatively through :class:`~blr_derive.rules.args.Ctx` (``ctx.expr("rate")``,
``ctx.name("state", "u")``, ``ctx.count(...)``, ``ctx.positive(...)``, ``ctx.when()``, ``ctx.args.pop(...)``).
:func:`rule_arguments` scans the syntax tree of the rule's class (its methods, inherited ones from classes in
``blr_derive/rules`` and ``staticmethod`` attributes, the first definition along the MRO winning) and follows the
module-level functions of ``blr_derive/rules`` those call, transitively.  A variable holds a reader when it is a
parameter named ``ctx`` or ``args``, or is assigned ``Ctx(...)`` or ``<x>.args(...)``.  A call guarded by
``<x>.name == 'rule'`` (``if`` or a conditional expression) counts for that rule only.  The type of an argument
follows from the accessor, its default from the call (or from the accessor's own default), so the list cannot
drift from what the rules accept."""
from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass, field
from functools import lru_cache

from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, Rule

ACCESSORS = ("expr", "name", "count", "positive", "when")
READER_PARAMS = ("ctx", "args")

#: what a ``name`` argument names, by its key (other keys: "a name")
NAME_KINDS = {
    "param": "name of a parameter or state of the update",
    "state": "name of the state it adds",
    "to": "name of the new variable",
    "oracle": "name of an oracle",
    "schedule": "name of a state (the schedule's product)",
}
#: dynamic keys (computed in the rule's source) shown by what they stand for
DYNAMIC_KEYS = {
    "pname": "<parameter>",
    "l.name": "<lambda1, lambda2, …>",
}
#: defaults computed in the source, shown by what they stand for
COMPUTED_DEFAULTS = {"mean_name(D)": "the mean parameter"}


@dataclass
class Argument:
    key: str
    types: list = field(default_factory=list)
    default: str | None = None         # shown default; None: required (unless ``optional``)
    optional: bool = False

    def type_text(self) -> str:
        return "; ".join(self.types)

    def default_text(self) -> str:
        if self.default is not None:
            return self.default
        return "optional" if self.optional else "required"


@lru_cache(maxsize=None)
def _module_tree(modname: str):
    return ast.parse(inspect.getsource(sys.modules[modname]))


def _top_def(modname: str, name: str, kind=ast.FunctionDef):
    return next((n for n in _module_tree(modname).body if isinstance(n, kind) and n.name == name), None)


def _resolve_function(modname: str, name: str):
    """(module name, FunctionDef) of a module-level function of blr_derive/rules that ``name`` refers to."""
    obj = getattr(sys.modules[modname], name, None)
    mod = getattr(obj, "__module__", "") or ""
    if not inspect.isfunction(obj) or not mod.startswith("blr_derive.rules"):
        return None
    node = _top_def(mod, obj.__name__)
    return (mod, node) if node is not None else None


def _class_functions(rule: Rule) -> list:
    """(module, FunctionDef) of every method and staticmethod attribute of the rule's class, overrides first."""
    seen, out = set(), []
    for cls in type(rule).__mro__:
        if cls in (Rule, object) or not cls.__module__.startswith("blr_derive.rules"):
            continue
        node = _top_def(cls.__module__, cls.__name__, ast.ClassDef)
        for item in node.body if node is not None else ():
            if isinstance(item, ast.FunctionDef) and item.name not in seen:
                seen.add(item.name)
                out.append((cls.__module__, item))
            elif isinstance(item, ast.Assign) and isinstance(item.value, ast.Call):
                call = item.value
                names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                if (isinstance(call.func, ast.Name) and call.func.id == "staticmethod" and call.args
                        and isinstance(call.args[0], ast.Name) and names and names[0] not in seen):
                    seen.add(names[0])
                    hit = _resolve_function(cls.__module__, call.args[0].id)
                    if hit is not None:
                        out.append(hit)
    return out


def _guard(test):
    """The rule names a test ``<x>.name == 'r'``, ``mode == 'r'`` or ``<x>.name in ('r', ...)`` restricts to
    (string constants that name registered rules), or None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.left, (ast.Attribute, ast.Name))):
        return None
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant):
        names = {right.value}
    elif isinstance(test.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        names = {e.value for e in right.elts if isinstance(e, ast.Constant)}
    else:
        return None
    return names if names and all(isinstance(n, str) and n in RULES for n in names) else None


def _ends_block(stmts) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise))


class _Scanner:
    """Collect the argument reads of one function body (for rule ``rule``) and the helpers it calls."""

    def __init__(self, rule_name, modname, fn, out):
        self.rule, self.mod, self.out = rule_name, modname, out
        self.readers = {a.arg for a in fn.args.args if a.arg in READER_PARAMS}
        self.loop_vars, self.var_keys, self.calls = set(), {}, []
        self.choices = {}                 # variable assigned from args.pop -> module-level collection it is checked in
        for node in ast.walk(fn):         # readers and the variables that hold an argument
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                var, v = node.targets[0].id, node.value
                if isinstance(v, ast.Call) and ((isinstance(v.func, ast.Name) and v.func.id == "Ctx")
                                                or (isinstance(v.func, ast.Attribute) and v.func.attr == "args")):
                    self.readers.add(var)
                key = self._read_key(v)
                if key is not None:
                    self.var_keys[var] = key
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and len(node.ops) == 1 \
                    and isinstance(node.ops[0], (ast.In, ast.NotIn)) and isinstance(node.comparators[0], ast.Name):
                self.choices[node.left.id] = node.comparators[0].id
        self.body = fn.body

    def _is_reader(self, node):
        return isinstance(node, ast.Name) and node.id in self.readers

    def _is_args(self, node):          # <reader>.args, or list(<reader>.args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list" and node.args:
            node = node.args[0]
        return isinstance(node, ast.Attribute) and node.attr == "args" and self._is_reader(node.value)

    def _read_key(self, call):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args \
                and isinstance(call.args[0], ast.Constant):
            f = call.func
            if (f.attr in ACCESSORS and self._is_reader(f.value)) or (f.attr == "pop" and self._is_args(f.value)):
                return call.args[0].value
        return None

    def run(self):
        self.block(self.body, None)
        return self.calls

    def block(self, stmts, guard):
        """Visit statements in order; after ``if <guard for this rule>: ... return`` the rest is unreachable."""
        for stmt in stmts:
            self.visit(stmt, guard)
            if isinstance(stmt, ast.If) and _ends_block(stmt.body) and self.rule in (_guard(stmt.test) or ()):
                return

    def visit(self, node, guard):
        if guard is not None and self.rule not in guard:
            return
        if isinstance(node, ast.If):
            g = _guard(node.test)
            self.visit(node.test, guard)
            self.block(node.body, g if g is not None else guard)
            self.block(node.orelse, guard)
            return
        if isinstance(node, ast.IfExp):
            g = _guard(node.test)
            self.visit(node.test, guard)
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                self.visit(child, g if g is not None else guard)
            for child in (node.orelse if isinstance(node.orelse, list) else [node.orelse]):
                self.visit(child, guard)
            return
        if isinstance(node, ast.For) and self._is_args(node.iter) and isinstance(node.target, ast.Name):
            self.loop_vars.add(node.target.id)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                and isinstance(node.left, ast.Constant) and self._is_args(node.comparators[0]):
            self._arg(node.left.value).optional = True
        if isinstance(node, ast.Call):
            self._call(node)
        for child in ast.iter_child_nodes(node):
            self.visit(child, guard)

    def _arg(self, key) -> Argument:
        arg = self.out.get(key)
        if arg is None:
            arg = self.out[key] = Argument(key)
        return arg

    def _key(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.loop_vars:
            return DYNAMIC_KEYS.get(node.id, f"<{node.id}>")
        text = ast.unparse(node)
        return DYNAMIC_KEYS.get(text, f"<{text}>")

    def _call(self, node):
        f = node.func
        if isinstance(f, ast.Name):
            hit = _resolve_function(self.mod, f.id)
            if hit is not None:
                self.calls.append(hit)
            first = node.args[0] if node.args else None
            if f.id == "parse_expression" and isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) \
                    and first.func.attr == "pop" and self._is_args(first.func.value) and first.args:
                self._record(self._key(first.args[0]), "expression", first)
            return
        if not isinstance(f, ast.Attribute):
            return
        if f.attr in ACCESSORS and self._is_reader(f.value):
            if f.attr == "when":
                self._record("when", "when", node)
            elif node.args:
                self._record(self._key(node.args[0]), f.attr, node)
        elif f.attr == "pop" and self._is_args(f.value) and node.args:
            self._record(self._key(node.args[0]), "pop", node)

    def _record(self, key, accessor, call):
        arg = self._arg(key)
        kind = _type_of(accessor, key, call, self)
        if kind not in arg.types and not (accessor == "pop" and arg.types):
            arg.types.append(kind)
        default = _default_of(accessor, call, self)
        if default is _OPTIONAL:
            arg.optional = True
        elif default is not None and arg.default is None:
            arg.default = default


_OPTIONAL = object()


def _keyword(call, name, position):
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    if kw is None and len(call.args) > position:
        return call.args[position]
    return kw


def _type_of(accessor, key, call, scanner) -> str:
    if accessor == "expr":
        logic = _keyword(call, "logic", 2)
        if isinstance(logic, ast.Constant) and logic.value is True:
            return "condition (a comparison or a boolean hyperparameter)"
        return "expression of hyperparameters"
    if accessor == "count":
        return "positive integer or int hyperparameter"
    if accessor == "positive":
        return "positive expression of hyperparameters"
    if accessor == "name":
        return NAME_KINDS.get(key, "a name")
    if accessor == "when":
        return "condition (a comparison or a boolean hyperparameter)"
    if accessor == "expression":
        return "expression"
    var = next((v for v, k in scanner.var_keys.items() if k == key), None)
    coll = getattr(sys.modules[scanner.mod], scanner.choices.get(var, ""), None)
    if isinstance(coll, (dict, tuple, list, set, frozenset)):
        return "one of " + ", ".join(f"`{c}`" for c in coll)
    return "a value"


def _render_default(node, scanner) -> str | None:
    if isinstance(node, ast.Constant):
        return None if node.value is None else str(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("Integer", "Float") \
            and node.args and isinstance(node.args[0], ast.Constant):
        return str(node.args[0].value)
    if isinstance(node, ast.Attribute) and node.attr in ("false", "true"):
        return node.attr
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                inner = ast.unparse(v.value)
                parts.append("{" + str(scanner.var_keys.get(inner, inner)) + "}")
        return "".join(parts)
    text = ast.unparse(node)
    return COMPUTED_DEFAULTS.get(text, text)


def _default_of(accessor, call, scanner):
    """The shown default of one read: a string, None (required) or _OPTIONAL."""
    if accessor == "when":
        return _OPTIONAL
    if accessor in ("expression",):
        return None
    node = _keyword(call, "default", 1)
    if node is None:
        if accessor in ("count", "positive", "expr", "name"):
            d = inspect.signature(getattr(Ctx, accessor)).parameters["default"].default
            return None if d is None else str(d)
        return None
    return _render_default(node, scanner)


def rule_arguments(rule: Rule) -> list[Argument]:
    """The arguments ``rule`` reads from its recipe entry, in the order its source reads them."""
    out, seen = {}, set()
    work = list(_class_functions(rule))
    while work:
        mod, fn = work.pop(0)
        if (mod, fn.name) in seen:
            continue
        seen.add((mod, fn.name))
        work += _Scanner(rule.name, mod, fn, out).run()
    return list(out.values())
