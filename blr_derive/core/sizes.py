"""Size parameters: a family or factorized recipe declared for every K, instantiated at a concrete K.

A declaration may open with a ``sizes`` section naming integer size parameters with a default and a range::

    sizes:
      K: {default: 3, min: 2, max: 16, description: number of classes}

Everything else in the declaration is then a *template*, expanded for concrete sizes into an ordinary
declaration (same keys, same line numbers) before anything is parsed or derived — the engine still sums,
integrates and differentiates concretely, at the instantiated K.  The notation is declarative text
substitution over integers; nothing is evaluated but integer arithmetic (``+ - *``, parentheses) over the
declared sizes and loop indices (never ``eval``):

* ``{E}`` in a string is replaced by the integer E, e.g. ``theta{K}``, ``p{k}``, ``{K-1}``; a string that is
  exactly one ``{E}`` becomes the integer itself (``size: "{K}"``).  ``{{`` and ``}}`` are literal braces.
* ``{OP k in A..B: BODY}`` joins BODY for k = A, ..., B (inclusive; an empty range is an error) with `` OP `` for OP one of
  ``+ - *`` or with ``, `` for ``,`` — e.g. ``1 - {- k in 1..K-1: p{k}}`` is ``1 - p1 - p2`` at K = 3.
  No parentheses are added.
* a list item ``"BODY for k in A..B"`` (a string) or ``{for: "k in A..B", item: BODY}`` (any value) is
  repeated for k = A..B (none when B < A); a mapping key ``"KEY for k in A..B"`` repeats the entry (its value is expanded with k).

A reference to a sized family gives the sizes next to the name: ``family: {name: categorical, K: 5}``;
sizes not given take their defaults, so a plain ``family: categorical`` is the family at its default K.
A bad size (not an integer, out of range, unknown) is a one-line located :class:`SpecError`.
"""
from __future__ import annotations

import contextvars
import re

from blr_derive.core.errors import SpecError
from blr_derive.core.text import Expanded, quote
from blr_derive.core.yamlio import LDict, LList, check_keys, where

#: no size may exceed this, whatever a file declares: the engine sums over K one-hot points and derives
#: K - 1 statistics symbolically, so sizes are small by nature
HARD_MAX = 64
SIZE_KEYS = {"default", "min", "max", "description"}
_FOR = re.compile(r"^(?P<body>.*\S)\s+for\s+(?P<var>[A-Za-z_]\w*)\s+in\s+(?P<lo>[^.]+)\.\.(?P<hi>.+)$", re.S)
_RANGE = re.compile(r"^\s*(?P<var>[A-Za-z_]\w*)\s+in\s+(?P<lo>[^.]+)\.\.(?P<hi>.+?)\s*$", re.S)
_JOIN = re.compile(r"^\s*(?P<op>[-+*,])\s*(?P<var>[A-Za-z_]\w*)\s+in\s+(?P<lo>[^.:]+)\.\.(?P<hi>[^:]+):", re.S)
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<op>[-+*()]))")
MAX_ITEMS = 4096
#: a template string is at most this long (expressions are at most 2000 characters), and one instantiation
#: produces at most MAX_OUTPUT characters and MAX_NODES list items and mapping entries: untrusted templates
#: cannot blow up memory or time by nesting repetitions
MAX_TEMPLATE = 4000
MAX_OUTPUT = 1_000_000
MAX_NODES = 100_000
_BUDGET = contextvars.ContextVar("blr_derive_sizes_budget", default=None)


def _charge(chars=0, nodes=0):
    budget = _BUDGET.get()
    if budget is None:
        return
    budget[0] += chars
    budget[1] += nodes
    if budget[0] > MAX_OUTPUT or budget[1] > MAX_NODES:
        raise _TemplateError(f"the templates expand to more than {MAX_OUTPUT} characters or {MAX_NODES} entries")


def _is_template(s: str) -> bool:
    if "{" not in s and "}" not in s and " for " not in s:
        return False
    if len(s) > MAX_TEMPLATE:
        raise _TemplateError(f"a template string is at most {MAX_TEMPLATE} characters")
    return True


class _TemplateError(Exception):
    pass


def _int_expr(text: str, env: dict) -> int:
    """An integer expression over the names in env: integers, names, + - *, unary -, parentheses."""
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _TemplateError(f"bad size expression '{text}' (integers, sizes, loop indices, + - * and "
                                 "parentheses only)")
        pos = m.end()
        if m.group("num") is not None:
            if len(m.group("num")) > 6:
                raise _TemplateError(f"integer too large in '{text}'")
            tokens.append(("num", int(m.group("num"))))
        elif m.group("name") is not None:
            if m.group("name") not in env:
                raise _TemplateError(f"unknown size or index '{m.group('name')}' in '{text}' "
                                     f"(known: {', '.join(sorted(env)) or 'none'})")
            tokens.append(("num", env[m.group("name")]))
        else:
            tokens.append(("op", m.group("op")))
    if not tokens:
        raise _TemplateError("empty size expression '{}'")
    i = 0

    def peek():
        return tokens[i] if i < len(tokens) else (None, None)

    def atom():
        nonlocal i
        kind, v = peek()
        if kind == "num":
            i += 1
            return v
        if (kind, v) == ("op", "-"):
            i += 1
            return -atom()
        if (kind, v) == ("op", "("):
            i += 1
            x = add()
            if peek() != ("op", ")"):
                raise _TemplateError(f"unbalanced parentheses in '{text}'")
            i += 1
            return x
        raise _TemplateError(f"bad size expression '{text}'")

    def mul():
        nonlocal i
        x = atom()
        while peek() == ("op", "*"):
            i += 1
            x *= atom()
            if abs(x) > 10 ** 6:
                raise _TemplateError(f"size expression '{text}' is too large")
        return x

    def add():
        nonlocal i
        x = mul()
        while peek() in (("op", "+"), ("op", "-")):
            op = tokens[i][1]
            i += 1
            x = x + mul() if op == "+" else x - mul()
        return x

    x = add()
    if i != len(tokens):
        raise _TemplateError(f"bad size expression '{text}'")
    return x


def _range(var, lo, hi, env, join=False):
    if var in env:
        raise _TemplateError(f"loop index '{var}' shadows a size or an outer index")
    a, b = _int_expr(lo, env), _int_expr(hi, env)
    if b < a and join:
        raise _TemplateError(f"empty range {var} in {lo.strip()}..{hi.strip()} ({a}..{b})")
    if b - a + 1 > MAX_ITEMS:
        raise _TemplateError(f"range {var} in {lo.strip()}..{hi.strip()} is too long")
    return [{**env, var: k} for k in range(a, max(a, b + 1))]


def _closing(text: str, start: int) -> int:
    """Index of the '}' closing the '{' at text[start]."""
    depth, j = 0, start
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise _TemplateError(f"unclosed '{{' in '{text}'")


def _subst(text: str, env: dict) -> str:
    out, j = [], 0
    while j < len(text):
        c = text[j]
        if text.startswith("{{", j) or text.startswith("}}", j):
            out.append(c)
            j += 2
        elif c == "{":
            end = _closing(text, j)
            inner = text[j + 1:end]
            m = _JOIN.match(inner)
            if m:
                body = inner[m.end():].strip()
                parts = [_subst(body, e) for e in _range(m.group("var"), m.group("lo"), m.group("hi"), env, True)]
                out.append((", " if m.group("op") == "," else f" {m.group('op')} ").join(parts))
            else:
                out.append(str(_int_expr(inner, env)))
            j = end + 1
        elif c == "}":
            raise _TemplateError(f"unmatched '}}' in '{text}'")
        else:
            out.append(c)
            j += 1
    text = Expanded("".join(out))
    _charge(chars=len(text))
    return text


def _scalar(value, env):
    if not isinstance(value, str) or not _is_template(value):
        return value
    s = value.strip()
    if s.startswith("{") and not s.startswith("{{") and _closing(s, 0) == len(s) - 1 and not _JOIN.match(s[1:-1]):
        return _int_expr(s[1:-1], env)
    return _subst(value, env)


def _expand(node, env, file):
    if isinstance(node, dict):
        out = LDict()
        out.file, out.line = getattr(node, "file", file), getattr(node, "line", None)
        for key, value in node.items():
            line = node.line_of(key) if isinstance(node, LDict) else None
            try:
                m = _FOR.match(key) if isinstance(key, str) and _is_template(key) else None
                envs = _range(m.group("var"), m.group("lo"), m.group("hi"), env) if m else [env]
                body = m.group("body") if m else key
                for e in envs:
                    k = _subst(body, e) if isinstance(body, str) and _is_template(body) else body
                    _charge(nodes=1)
                    if k in out:
                        raise _TemplateError(f"the template gives the key '{k}' twice")
                    out[k] = _expand(value, e, file)
                    out.lines[k] = line
            except (_TemplateError, RecursionError) as exc:
                msg = "templates nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                raise SpecError(msg, out.file, line) from None
        return out
    if isinstance(node, list):
        out = LList()
        out.file, out.line = getattr(node, "file", file), getattr(node, "line", None)
        for i, item in enumerate(node):
            line = node.line_of(i) if isinstance(node, LList) else None
            try:
                if isinstance(item, dict) and "for" in item:
                    check_keys(item, {"for", "item"}, ("for", "item"), "a repeated list item")
                    m = _RANGE.match(item["for"]) if isinstance(item["for"], str) else None
                    if not m:
                        raise _TemplateError("'for' must read 'k in A..B'")
                    for e in _range(m.group("var"), m.group("lo"), m.group("hi"), env):
                        out.append(_expand(item["item"], e, file))
                        out.lines.append(line)
                        _charge(nodes=1)
                    continue
                m = _FOR.match(item) if isinstance(item, str) and _is_template(item) else None
                if m:
                    for e in _range(m.group("var"), m.group("lo"), m.group("hi"), env):
                        out.append(_scalar(m.group("body"), e))
                        out.lines.append(line)
                        _charge(nodes=1)
                    continue
                out.append(_expand(item, env, file))
                out.lines.append(line)
            except (_TemplateError, RecursionError) as exc:
                msg = "templates nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                raise SpecError(msg, out.file, line) from None
            if len(out) > MAX_ITEMS:
                raise SpecError("the template expands to too many items", out.file, line)
        return out
    return _scalar(node, env)          # a _TemplateError here is located by the enclosing container


def declared_sizes(spec, what="family"):
    """The ``sizes`` section → {name: (default, min, max, (file, line))}; {} when there is none."""
    decl = spec.get("sizes") if isinstance(spec, dict) else None
    if decl is None:
        return {}
    if not isinstance(decl, dict) or not decl:
        raise SpecError(f"sizes of a {what} must be a non-empty mapping name -> {{default, min, max}}",
                        *where(spec, "sizes"))
    out = {}
    for name, d in decl.items():
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise SpecError(f"size name '{quote(name)}' must be an identifier", *where(decl, name))
        if isinstance(d, int) and not isinstance(d, bool):
            d = LDict(default=d)
            d.file, d.line = where(decl, name)
        if not isinstance(d, dict):
            raise SpecError(f"size '{name}' must be an integer or a mapping {{default, min, max}}", *where(decl, name))
        check_keys(d, SIZE_KEYS, ("default",), f"size '{name}'")
        vals = {}
        for k, fallback in (("min", 1), ("max", HARD_MAX), ("default", None)):
            v = d.get(k, fallback)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= HARD_MAX:
                raise SpecError(f"size '{name}': {k} must be an integer from 1 to {HARD_MAX}", *where(d, k))
            vals[k] = v
        if not vals["min"] <= vals["default"] <= vals["max"]:
            raise SpecError(f"size '{name}': default {vals['default']} is outside {vals['min']}..{vals['max']}",
                            *where(d, "default"))
        out[name] = (vals["default"], vals["min"], vals["max"], where(decl, name))
    return out


def resolve_sizes(declared: dict, given: dict | None, where_given=(None, None), owner="family") -> tuple:
    """Given sizes (name -> value, validated against the declaration) with defaults filled in, as a sorted
    tuple of (name, int) pairs: the cache key of an instantiation.  ``where_given`` is (the mapping the
    sizes were given in, (file, line) of the declaring ``sizes`` section): a size given in a file is located
    there; one given on the command line at its declaration (an unknown one at the ``sizes`` section)."""
    located = isinstance(given, LDict)
    given = dict(given or {})
    for name, value in given.items():
        file, loc = where(where_given[0], name) if located else (None, None)
        if file is None:
            file, loc = declared[name][3] if name in declared else (where_given[1] or (None, None))
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise SpecError(f"'{name}' is not a size of the {owner} (sizes: {known})", file, loc)
        lo, hi = declared[name][1], declared[name][2]
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"size {name} must be an integer from {lo} to {hi}, got {value!r}", file, loc)
        if not lo <= value <= hi:
            raise SpecError(f"size {name} = {value} is outside {lo}..{hi}", file, loc)
    return tuple(sorted((n, given.get(n, d[0])) for n, d in declared.items()))


def instantiate(spec, sizes: tuple, file=None):
    """The declaration with its templates expanded at the given sizes (a tuple from :func:`resolve_sizes`);
    the ``sizes`` section is dropped."""
    env = dict(sizes)
    token = _BUDGET.set([0, 0])
    try:
        return _instantiate(spec, env, file)
    except RecursionError:
        raise SpecError("templates nested too deeply", getattr(spec, "file", file), getattr(spec, "line", None)) from None
    finally:
        _BUDGET.reset(token)


def _instantiate(spec, env, file):
    out = LDict()
    out.file, out.line = getattr(spec, "file", file), getattr(spec, "line", None)
    for key, value in spec.items():
        if key == "sizes":
            continue
        sub = _expand(LDict({key: value}) if not isinstance(spec, LDict) else _one(spec, key), env, out.file)
        for k, v in sub.items():
            if k in out:
                raise SpecError(f"the template gives the key '{k}' twice", *where(spec, key))
            out[k] = v
            out.lines[k] = sub.lines.get(k)
    return out


def _one(spec, key):
    d = LDict({key: spec[key]})
    d.file, d.line = spec.file, spec.line
    d.lines[key] = spec.line_of(key)
    return d


def instantiate_recipe(spec, file=None, given: dict | None = None):
    """A recipe with a ``sizes`` section (e.g. a factorized recipe with K copies of a block) instantiated at
    ``given`` sizes (name -> int), the others at their defaults; a recipe without one is returned as it is
    (and must not be given sizes)."""
    if not isinstance(spec, dict) or "sizes" not in spec:
        if given:
            raise SpecError(f"'{next(iter(given))}' is not a size of the recipe (it declares no sizes)", file,
                            getattr(spec, "line", None))
        return spec
    return instantiate(spec, resolve_sizes(declared_sizes(spec, "recipe"), given, (given, where(spec, "sizes")),
                                               "recipe"), file)
