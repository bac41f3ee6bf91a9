"""A mixture whose components are an array axis (``components: K``; blr_derive/ir/mixture_axis.py) in numpy.

The program is written for a generic component k and a generic other component j; every quantity is one array
with its component axes first, in the order j, k (``ir.components["axes"]``), then its own dimensions.  A symbol
prints as its array (``m_j`` and ``m_k`` are both ``m``); operands of an elementwise operation are laid out on
the union of their axes by indexing (``m[:, None, ...]`` for m_j in a (j, k) expression); a matrix product, a
trace and a sum over j of a product are one ``einsum`` whose subscripts carry the axes ``j``, ``k`` and the matrix
indices (the j subscript dropped from the output of a sum over j); ``log Σ_j exp`` is a logsumexp over axis 0; a
solve with a stack of matrices is ``linalg.solve`` over the stack.  Nothing loops over the components in Python
except the oracle calls, one per component mean.  The jax target prints the same lines with ``jnp``
(codegen/backends/jax/mixture_axis.py).
"""
from __future__ import annotations

import re

import sympy as sp

from blr_derive.codegen.inert import identifier
from blr_derive.core.errors import CodegenError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum
from blr_derive.ir.mixture_axis import AXES
from blr_derive.rules.mixture import LogSumExpOverComponents, MatSumOverComponents, SumOverComponents

#: index letters of matrix dimensions in an einsum (the component axes are j and k)
LETTERS = "abcdefghilmnopqrstuvwxyz"
_SIMPLE = re.compile(r"^[A-Za-z_][\w.]*(\[[^\[\]]*\])?$")


def _rank(e):
    """Trailing (matrix) dimensions of a value: 0 for a scalar or 1×1, 1 for a vector, 2 for a matrix."""
    if not is_mat(e):
        return 0
    return (e.shape[0] != 1) + (e.shape[1] != 1)


def _atomic(text):
    """Whether ``text`` needs no parentheses as an operand: a name, a number, or a name followed by one bracket
    group that closes at the end (a call or an index)."""
    if _SIMPLE.match(text) or re.match(r"^[\d.]+$", text):
        return True
    m = re.match(r"^[A-Za-z_][\w.]*[(\[]", text)
    if not m:
        return False
    depth = 0
    for i, ch in enumerate(text[m.end() - 1:], m.end() - 1):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if depth == 0 and i != len(text) - 1:
            return False
    return depth == 0


def _wrap(text):
    return text if _atomic(text) else f"({text})"


class AxisPrinter:
    """Prints expressions of a component-axis program (see the module docstring) with ``pr`` (the target's
    printer: functions, constants, helpers and imports) for everything without component axes."""

    def __init__(self, pr, components, xp="numpy"):
        self.pr, self.xp = pr, xp
        self.axes, self.names = components["axes"], components["names"]
        self.size = identifier(components["size"])

    # ------------------------------------------------------------------ entry points
    def doprint(self, e) -> str:
        return self._p(e)[0]

    def name(self, sym) -> str:
        return identifier(self.names.get(sym, str(sym)))

    # ------------------------------------------------------------------ helpers
    def _axes(self, e):
        from_leaves = self.axes.get(e)
        if from_leaves is not None:
            return from_leaves
        found = set()
        for a in e.args if isinstance(e, sp.Basic) else ():
            found |= set(self._axes(a))
        if isinstance(e, (SumOverComponents, MatSumOverComponents, LogSumExpOverComponents)):
            found.discard("j")
        return "".join(x for x in AXES if x in found)

    @staticmethod
    def _lay(text, axes, union, trailing=None):
        """``text`` (an array with ``axes`` first) indexed to lie on ``union``; ``trailing``: the number of new
        trailing dimensions of a scalar broadcast against matrices (None: keep its own, ``...``)."""
        if axes == union and not trailing:
            return text
        if not axes and trailing is None:
            return text                              # no component axis: numpy broadcasts it as it is
        index = [":" if a in axes else "None" for a in union]
        index += ["None"] * trailing if trailing is not None else ["..."]
        return f"{_wrap(text)}[{', '.join(index)}]"

    def _via_printer(self, e, parts):
        """``e`` printed by the target's printer with its arguments ``parts`` [(sub-expression, text)] as
        placeholders (identifiers, replaced by the texts afterwards)."""
        reps, texts = {}, {}
        for i, (sub, text) in enumerate(parts):
            ph = sp.Symbol(f"_AXP{i}_", real=True) if not is_mat(sub) else sp.MatrixSymbol(f"_AXP{i}_", *sub.shape)
            reps[sub] = ph
            texts[f"_AXP{i}_"] = _wrap(text)
        out = self.pr.doprint(e.xreplace(reps))
        return re.sub(r"_AXP\d+_", lambda m: texts[m.group(0)], out)

    # ------------------------------------------------------------------ the printer
    def _p(self, e):
        """(text, axes) of ``e``."""
        if isinstance(e, (sp.Symbol, sp.MatrixSymbol)):
            return (self.name(e) if e in self.axes or e in self.names else self.pr.doprint(e)), self.axes.get(e, "")
        axes = self._axes(e)
        if not axes and not e.has(SumOverComponents, MatSumOverComponents, LogSumExpOverComponents):
            return self.pr.doprint(e), ""
        if isinstance(e, (SumOverComponents, MatSumOverComponents)):
            return self._sum_j(e.args[0]), axes
        if isinstance(e, LogSumExpOverComponents):
            text, ax = self._p(e.args[0])
            if "j" not in ax:
                raise CodegenError(f"a log-sum-exp over the components of a value without a component axis: {e}")
            return self._via_printer(ComponentLogSumExp(sp.Symbol("_x", real=True)), [(sp.Symbol("_x", real=True), text)]), axes
        if isinstance(e, sp.Trace):
            return self._trace(e.arg, axes), axes
        if isinstance(e, sp.log) and isinstance(e.args[0], sp.Determinant):     # log det: slogdet (printer.py)
            text, ax = self._p(e.args[0].arg)
            self.pr.helpers.add("_logdet")
            return f"_logdet({text})", ax
        if isinstance(e, sp.Determinant):
            text, ax = self._p(e.arg)
            return f"{self.xp}.linalg.det({text})", ax
        if isinstance(e, sp.MatMul):
            return self._matmul(e, axes, drop_j=False), axes
        if isinstance(e, sp.MatAdd):
            parts = [self._p(a) for a in e.args]
            return " + ".join(self._lay(t, ax, axes) for t, ax in parts).replace("+ -", "- "), axes
        if isinstance(e, sp.Transpose):
            text, ax = self._p(e.arg)
            return (text if _rank(e) < 2 else f"{self.xp}.swapaxes({text}, -1, -2)"), ax
        if is_mat(e):
            raise CodegenError(f"the component-axis printer cannot print {type(e).__name__}: {e}")
        # a scalar expression (also elementwise arrays): its arguments with component axes on the union of them
        parts = []
        for a in e.args:
            if self._axes(a) or a.has(SumOverComponents, MatSumOverComponents, LogSumExpOverComponents):
                text, ax = self._p(a)
                parts.append((a, self._lay(text, ax, axes)))
        return self._via_printer(e, parts), axes

    def _sum_j(self, arg):
        """Σ_j arg: one einsum for a product, a sum of sums for a sum, else a sum over the leading (j) axis."""
        if isinstance(arg, sp.MatMul) or (isinstance(arg, sp.Mul) and any(self._axes(a) for a in arg.args)
                                          and is_mat(arg)):
            return self._matmul(arg, self._axes(arg), drop_j=True)
        if isinstance(arg, (sp.MatAdd, sp.Add)):
            out_axes = self._axes(arg).replace("j", "")
            terms = []
            for a in arg.args:
                t = self._sum_j(a) if "j" in self._axes(a) else f"{self.size}*{_wrap(self._p(a)[0])}"
                terms.append(self._lay(t, self._axes(a).replace("j", ""), out_axes))
            return " + ".join(terms)
        text, ax = self._p(arg)
        if "j" not in ax:
            return f"{self.size}*{_wrap(text)}"
        return self._via_printer(ComponentSum(sp.Symbol("_x", real=True)), [(sp.Symbol("_x", real=True), text)])

    def _operand(self, f):
        """(text, axes, transposed) of a factor of a matrix product."""
        if isinstance(f, sp.Transpose):
            text, ax = self._p(f.arg)
            return text, ax, True
        text, ax = self._p(f)
        return text, ax, False

    def _chain(self, coeff, mats, out_axes, trace=False):
        """One einsum: ``coeff`` (a scalar, possibly with component axes) times the product of ``mats``; the
        output has ``out_axes`` then the product's row and column indices (none for a trace or a 1×1)."""
        n = len(mats)
        if n + 1 > len(LETTERS):
            raise CodegenError("matrix chain too long for the component-axis printer")
        idx = list(LETTERS[:n + 1])
        if trace:
            idx[n] = idx[0]
        ops, subs = [], []
        for i, f in enumerate(mats):
            text, ax, transposed = self._operand(f)
            r, c = f.shape
            sub = (idx[i] if r != 1 else "") + (idx[i + 1] if c != 1 else "")
            if transposed and r != 1 and c != 1:
                sub = sub[::-1]
            ops.append(text)
            subs.append(ax + sub)
        prefix = ""
        if coeff != 1:
            ctext, cax = self._p(coeff)
            if cax:
                ops.insert(0, ctext)
                subs.insert(0, cax)
            else:
                prefix = "-" if coeff == -1 else f"{_wrap(ctext)}*"
        out = out_axes
        if not trace:
            shape = sp.MatMul(*mats).shape if n > 1 else mats[0].shape
            out += (idx[0] if shape[0] != 1 else "") + (idx[n] if shape[1] != 1 else "")
        if len(ops) == 1 and subs[0] == out:            # one operand, nothing contracted: the array itself
            return f"{prefix}{_wrap(ops[0]) if prefix else ops[0]}"
        return f"{prefix}{self.xp}.einsum('{','.join(subs)}->{out}', {', '.join(ops)})"

    @staticmethod
    def _split(e):
        coeff = sp.Integer(1)
        mats: list[sp.Basic] = []
        for a in e.args:
            if is_mat(a):
                if isinstance(a, sp.MatMul):
                    c, m = AxisPrinter._split(a)
                    coeff, mats = coeff * c, mats + m
                else:
                    mats.append(a)
            else:
                coeff = coeff * a
        return coeff, mats

    def _matmul(self, e, axes, drop_j):
        coeff, mats = self._split(e)
        out_axes = axes.replace("j", "") if drop_j else axes
        if any(isinstance(f, sp.Inverse) for f in mats):
            if drop_j or not isinstance(mats[0], sp.Inverse):
                raise CodegenError(f"the component-axis printer solves with a leading inverse only: {e}")
            A = mats[0].arg
            rest = sp.MatMul(*mats[1:]) if len(mats) > 2 else mats[1]
            a_text, a_ax = self._p(A)
            b_text, b_ax = self._p(rest)
            union = "".join(x for x in AXES if x in set(a_ax) | set(b_ax))
            a_text, b_text = self._lay(a_text, a_ax, union), self._lay(b_text, b_ax, union)
            solved = (f"{self.xp}.linalg.solve({a_text}, {_wrap(b_text)}[..., None])[..., 0]" if _rank(rest) == 1
                      else f"{self.xp}.linalg.solve({a_text}, {b_text})")
            if coeff == 1:
                return solved
            ctext, cax = self._p(coeff)
            return f"{self._lay(ctext, cax, union, _rank(e))}*{_wrap(solved)}"
        return self._chain(coeff, mats, out_axes)

    def _trace(self, arg, axes):
        if isinstance(arg, sp.MatAdd):
            return " + ".join(self._lay(self._trace(a, self._axes(a)), self._axes(a), axes) for a in arg.args)
        if isinstance(arg, sp.MatMul):
            coeff, mats = self._split(arg)
        else:
            coeff, mats = sp.Integer(1), [arg]
        return self._chain(coeff, mats, axes, trace=mats[0].shape[0] == mats[-1].shape[1] and arg.shape != (1, 1))


def lower(ir, pr, xp="numpy"):
    """The template's view of a component-axis mixture: (oracle lines, assignments [(lhs, rhs)], outputs
    [(name, text)], SHAPES, SYMMETRIC) printed with ``pr`` (the target's printer) on arrays of module ``xp``."""
    comp = ir.components
    ap = AxisPrinter(pr, comp, xp)
    K = identifier(comp["size"])
    calls = []
    for c in ir.oracle_calls:
        name = ap.name(c.symbol)
        arg = ap.name(c.argument) if c.argument in comp["names"] else None
        if arg is None:
            raise CodegenError(f"an oracle of a component-axis mixture is called at a component's mean: {c.argument}")
        calls.append((name, f'_array("{name}", {xp}.stack([oracles["{c.oracle}"]({arg}[_k]) for _k in '
                                  f'range({K})]), _dims, "{c.oracle}")'))
    assigns = [(ap.name(s), ap.doprint(e)) for s, e in ir.assignments]
    outputs = [(name, ap.name(sym)) for name, sym in ir.outputs]
    return ap, calls, assigns, outputs


def shapes(ir, module_shapes):
    """SHAPES and SYMMETRIC of a component-axis module: the single-family module's shapes (``module_shapes``)
    with the component axis first for the state and the oracle values (elementwise ``"*"`` shapes unchanged)."""
    comp = ir.components
    K = identifier(comp["size"])
    names = comp["names"]
    base = module_shapes(ir)
    out = {}
    for key, shape in base.items():
        sym = next((c.symbol for c in ir.oracle_calls if str(c.symbol) == key), None)
        name = identifier(names[sym]) if sym is not None else key
        per_component = sym is not None or key in comp["state"]
        out[name] = (K,) + shape if per_component and not isinstance(shape, str) else shape
    rename = {str(c.symbol): identifier(names[c.symbol]) for c in ir.oracle_calls}
    symmetric = sorted(rename.get(n, n) for n in ir.symmetric)
    return out, symmetric
