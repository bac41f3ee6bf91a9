"""torch's elementwise printer: per-tensor torch expressions, shared by the torch target (its fused path) and the
host-side torch code of every torch.optim optimizer a target writes (the torch and Triton optimizers' objective(),
codegen/objective.py).  A module of its own, outside codegen/backends/torch, so that the shared objective printer
and the Triton target use it without importing the torch target's package (tests/unit/codegen/
test_target_independence.py; the torch package imports codegen/objective.py)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import CodegenError, UnsupportedTarget
from blr_derive.codegen.printing import KernelPrinter, stable_sech


class ElementwisePrinter(KernelPrinter):
    """Per-tensor elementwise torch expressions for the compiled (fused) path.  Piecewise conditions are
    host booleans (Python bools): torch.compile specializes on them."""

    MAXIMUM = "torch.maximum"
    MINIMUM = "torch.minimum"
    LOG = "torch.log"
    LOG1P = "torch.log1p"

    def _print_Pow(self, expr, rational=False):
        b, e = expr.args
        if e == sp.Rational(1, 2):
            return f"torch.sqrt({self._print(b)})"
        if e == sp.Rational(-1, 2):
            return f"torch.rsqrt({self._print(b)})"
        if e == -1:
            return f"(1/{self.parenthesize(b, 60)})"
        return f"{self.parenthesize(b, 60)}**{self.parenthesize(e, 60)}"

    #: sympy function name -> the torch function that computes it elementwise (sympy's known_functions model;
    #: functions with no entry here raise UnsupportedTarget, never fall back to the math module)
    KNOWN_FUNCTIONS = {
        "exp": "torch.exp", "tanh": "torch.tanh", "sin": "torch.sin", "cos": "torch.cos", "cosh": "torch.cosh",
        "sinh": "torch.sinh", "sign": "torch.sign", "loggamma": "torch.lgamma", "digamma": "torch.digamma",
        "Abs": "torch.abs", "sqrt": "torch.sqrt", "erf": "torch.erf", "erfc": "torch.erfc", "expm1": "torch.expm1",
        "atan": "torch.atan", "asin": "torch.asin", "acos": "torch.acos", "tan": "torch.tan", "atanh": "torch.atanh",
        "asinh": "torch.asinh", "acosh": "torch.acosh", "floor": "torch.floor", "ceiling": "torch.ceil",
        "ndtri": "torch.special.ndtri", "atan2": "torch.atan2",
        "log_ndtr": "torch.special.log_ndtr",
    }
    TARGET_NAME = "torch"

    NAN_WHERE = "torch.where({test}, {x}, math.nan)"
    WHERE = "torch.where({test}, {a}, {b})"

    def _print_binary(self, expr):
        return f"torch.where({self.parenthesize(expr.args[0], 0)} < 0, -1.0, 1.0)"

    def _print_sech(self, expr):
        return stable_sech(self._print(expr.args[0]), "torch.abs", "torch.exp")

    def _print_ndtr(self, expr):
        # torch.special.ndtr is (1 + erf(x/√2))/2, which cancels in the lower tail (2% off at x = -8, 0 at -10):
        # erfc(-x/√2)/2 keeps its precision down to the underflow
        return f"(0.5*torch.special.erfc(-({self._print(expr.args[0])})*0.7071067811865476))"

    def _print_gamma(self, expr):
        return f"torch.exp(torch.lgamma({self._print(expr.args[0])}))"

    def _print_besselie(self, expr):
        """The scaled I_0 and I_1 of every printer's lowering (codegen/scaled.py); torch has no other order."""
        nu, x = expr.args
        if nu not in (0, 1):
            raise UnsupportedTarget(f"the torch target has I_0 and I_1 only (torch.special.i0e/i1e), not I_{nu}")
        return f"torch.special.i{int(nu)}e({self._print(x)})"

    def _print_dbesselke(self, expr):
        """The scaled K_0 and K_1 of every printer's lowering (codegen/scaled.py); torch has no other order and no
        derivative in the order."""
        n, nu, x = expr.args
        if n != 0 or nu not in (0, 1):
            what = f"K_{nu}" if n == 0 else "a derivative of K_nu in its order"
            raise UnsupportedTarget(f"the torch target has K_0 and K_1 only (torch.special.scaled_modified_bessel_k0/"
                                    f"k1), not {what}")
        return f"torch.special.scaled_modified_bessel_k{int(nu)}({self._print(x)})"

    def _print_polygamma(self, expr):
        """ψ⁽ⁿ⁾(x); for n ≥ 1 as (−1)ⁿ⁺¹ n! ζ(n + 1, x) (DLMF 25.11.12) by torch.special.zeta: torch's own trigamma
        (torch.polygamma(1, x), a separate kernel) is off by 4.8e-10 relative at x = 1 and 3.7e-10 at x = 2 in
        float64 (torch 2.13), which a beta's or gamma's step carries into its state (1.4e-9 from the numpy target);
        zeta is within 4e-16 from x = 1e-8 to 1e12 and has its derivative in x (autograd, differentiable=True)."""
        n, x = expr.args
        if n.is_Integer and n >= 1:
            sign = "" if n % 2 else "-"
            scale = "" if n == 1 else f"{sp.factorial(n)}*"
            zeta = f"torch.special.zeta({float(n + 1)!r}, {self._print(x)})"
            return zeta if n == 1 else f"({sign}{scale}{zeta})"          # parenthesized: a power's base
        return f"torch.polygamma({self._print(n)}, {self._print(x)})"

    def _print_softplus(self, expr):
        x = self._print(expr.args[0])
        return f"torch.logaddexp(torch.zeros_like({x}), {x})"

    def _print_Max(self, expr):
        """max of tensors by torch.maximum, a number among them as torch.clamp's bound (torch.maximum takes tensors
        only): the largest exponent of the exponential-sum lowering, max(0, x) (codegen/expsums.py)."""
        return self._clamped(expr, "min", max)

    def _print_Min(self, expr):
        return self._clamped(expr, "max", min)

    def _clamped(self, expr, bound, pick):
        numbers = [a for a in expr.args if a.is_Number]
        tensors = [a for a in expr.args if not a.is_Number]
        if not tensors:
            return self._print(pick(numbers))
        out = self._fold_binary(self.MAXIMUM if pick is max else self.MINIMUM, tensors)
        return f"torch.clamp({out}, {bound}={self._print(pick(numbers))})" if numbers else out

    def _print_logaddexp(self, expr):
        """log(e^x + e^y) of the exponential-sum lowering (codegen/expsums.py); a number among the two is a tensor
        like the other (torch.logaddexp takes tensors only)."""
        x, y = expr.args
        if x.is_Number and y.is_Number:
            raise CodegenError("logaddexp of numbers only: nothing to compute elementwise")
        px, py = self._print(x), self._print(y)
        px = f"torch.full_like({py}, {px})" if x.is_Number else px
        py = f"torch.full_like({px}, {py})" if y.is_Number else py
        return f"torch.logaddexp({px}, {py})"

    def _print_xlogy(self, expr):
        return f"torch.special.xlogy({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_logsumexp(self, expr):
        """log Σ exp over the arguments, elementwise; a number among them (the 0 of log(1 + e^x)) is a tensor
        like the first argument that is not one (torch.broadcast_tensors takes tensors only)."""
        ref = next((self._print(a) for a in expr.args if not a.is_Number), None)
        if ref is None:
            raise CodegenError("logsumexp of numbers only: nothing to compute elementwise")
        args = ", ".join(f"torch.full_like({ref}, {self._print(a)})" if a.is_Number else self._print(a)
                         for a in expr.args)
        return f"torch.logsumexp(torch.stack(torch.broadcast_tensors({args})), dim=0)"
