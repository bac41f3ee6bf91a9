"""``kronecker_eigenbasis`` — a convention of the eigenbasis structure (``blr_derive/rules/eigenbasis.py``): the
basis Q = Q_R ⊗ Q_L of the precision is the eigenbasis of a Kronecker-factored second-moment estimate, refreshed
every T steps (Shampoo's factors, Gupta et al. 2018; SOAP, Vyas et al. 2025, Alg. 1 and 4):

    L ← β L + (1 − β) G Gᵀ,   R ← β R + (1 − β) Gᵀ G                           (every step, after the update)
    every T steps (t mod T = 0):  Q_L, Q_R ← the eigenbases of L, R

with the elementwise states of the rotated coordinates kept meaningful across the change of basis:

* the states named in ``carry`` (first-moment averages, which transform like the gradient) are rotated into the new
  basis: X ← Q_L,newᵀ Q_L X Q_Rᵀ Q_R,new (the slides' "update momentum (new basis)");
* the other elementwise states (the diagonal of the precision and its averages) stay with the basis vectors they
  belong to: with ``method: power_iteration`` (default) the new basis is one power iteration and a QR step from the
  old one with its columns ordered by decreasing Rayleigh quotient (Vyas et al. Alg. 4), and these states' rows and
  columns take the same order; with ``method: eigh`` the basis is a full eigendecomposition (columns by decreasing
  eigenvalue) and the states stay as they are.

Arguments: ``rate`` β (required), ``every`` T (a positive integer or an int hyperparameter), ``method``
(``power_iteration`` | ``eigh``), ``carry`` (a list of state names).  L and R are new state (rows × rows,
cols × cols); the first basis is the state's Q_L, Q_R as given.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, AuxState, register
from blr_derive.rules.eigenbasis import EigenbasisRule, Eigenbasis, Entrywise, MatSelect, PowerBasis, Reordered
from blr_derive.rules.program import step

METHODS = ("power_iteration", "eigh")


class KroneckerEigenbasis(EigenbasisRule):
    name = "kronecker_eigenbasis"
    kind = "convention"
    equation = "Vyas et al. (2025) Alg. 1, 4; Gupta et al. (2018)"
    summary = ("the basis from exponential averages L ← βL + (1-β)GGᵀ, R ← βR + (1-β)GᵀG, refreshed every T steps "
               "(power iteration + QR, or eigh); named states rotated into the new basis, the others reordered")

    def eigenbasis_refresh(self, ectx, args):
        D = ectx.D
        rate = args.expr("rate")
        every = args.count("every", None)
        method = args.args.pop("method", "power_iteration")
        carry = args.args.pop("carry", [])
        args.done()
        if method not in METHODS:
            raise ectx.fail(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        if not isinstance(carry, list) or not all(isinstance(n, str) for n in carry):
            raise ectx.fail("carry must be a list of state names")
        unknown = [n for n in carry if n not in ectx.carried]
        if unknown:
            raise ectx.fail(f"carry names '{unknown[0]}', which is not an elementwise state of this update (known: "
                            f"{', '.join(sorted(ectx.carried)) or 'none'})")
        if ectx.QL_new is not None:
            raise ectx.fail("the basis is already refreshed by another rule (name one)")
        t = step(D)
        rows, cols, G, QL, QR = ectx.rows, ectx.cols, ectx.G, ectx.QL, ectx.QR
        L, R = sp.MatrixSymbol("L", rows, rows), sp.MatrixSymbol("R", cols, cols)
        L_new, R_new = sp.MatrixSymbol("L_new", rows, rows), sp.MatrixSymbol("R_new", cols, cols)
        eL = rate * L + (1 - rate) * G * G.T
        eR = rate * R + (1 - rate) * G.T * G
        D.aux_state += [AuxState("L", L, L_new, None, "exponential average of G Gᵀ (rows × rows)"),
                        AuxState("R", R, R_new, None, "exponential average of Gᵀ G (cols × cols)")]
        D.updates += [("L", L_new, eL), ("R", R_new, eR)]
        ectx.symmetric |= {L, R}
        refresh = sp.Eq(sp.Mod(t, every), 0)
        if method == "eigh":
            QL_ref, QR_ref = Eigenbasis(L_new), Eigenbasis(R_new)
        else:
            QL_ref, QR_ref = PowerBasis(L_new, QL), PowerBasis(R_new, QR)
        ectx.QL_new, ectx.QR_new = MatSelect(refresh, QL_ref, QL), MatSelect(refresh, QR_ref, QR)
        QLn, QRn = sp.MatrixSymbol("Q_L_new", rows, rows), sp.MatrixSymbol("Q_R_new", cols, cols)
        lines = []
        for name, s in ectx.carried.items():
            X = Entrywise(s, rows, cols)
            if name in carry:
                moved = QLn.T * QL * X * QR.T * QRn
            elif method == "power_iteration":
                moved = Reordered(X, L_new, QL, R_new, QR)
            else:
                continue
            out = sp.Symbol(f"{name}_next", real=True)
            ectx.state_after[name] = (out, MatSelect(refresh, moved, X))
            lines.append((out, moved, r"\leftarrow"))
        D.symbol_names.update({L: r"\mathbf{L}", R: r"\mathbf{R}", L_new: r"\mathbf{L}_{t+1}",
                               R_new: r"\mathbf{R}_{t+1}", QLn: r"\mathbf{Q}_{L,t+1}", QRn: r"\mathbf{Q}_{R,t+1}"})
        D.add(self.name, RULES[self.name].equation, "Eigenbasis from Kronecker averages (convention)",
              "The basis is the eigenbasis of exponential averages of G Gᵀ and Gᵀ G (Shampoo's factors), refreshed "
              f"every {every} steps ({'one power iteration and a QR step, columns by decreasing Rayleigh quotient' if method == 'power_iteration' else 'an eigendecomposition, columns by decreasing eigenvalue'}); "
              + (f"{', '.join(carry)} rotated into the new basis" if carry else "no state rotated")
              + ("; the other elementwise states reordered with the basis' columns." if method == "power_iteration"
                 else "; the other elementwise states kept."),
              [(L_new, eL, r"\leftarrow"), (R_new, eR, r"\leftarrow"),
               (QLn, QL_ref, r"\leftarrow \text{if } t \bmod T = 0:"), (QRn, QR_ref, r"\leftarrow")] + lines)


register(KroneckerEigenbasis())
