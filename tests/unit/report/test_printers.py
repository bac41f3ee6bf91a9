"""The two printers of the reports: LaTeX (``blr_derive/report/texprint.py``) and plain text
(``blr_derive/core/pretty.py``), on representative expressions, as exact strings."""
import pytest
import sympy as sp

from blr_derive.core.pretty import pretty
from blr_derive.report.texprint import fix_name_tex, latex, name_tex
from blr_derive.rules.base import TexForm

lr, wd, m, g, t, ess, mh = sp.symbols("lr weight_decay m g t ess momentum_hat")
price = sp.Symbol("hess_approx__price")          # a choice hyperparameter's indicator (spec/hyper.py)
nesterov = sp.Symbol("nesterov")
a = sp.Symbol("a")
X = sp.MatrixSymbol("X", 3, 3)


@pytest.mark.parametrize("name, tex", [
    ("lr", r"\mathrm{lr}"),
    ("weight_decay", r"\mathrm{weight\_decay}"),
    ("beta1", r"\beta_{1}"),
    ("lambda2", r"\lambda_{2}"),
    ("rho", r"\rho"),
    ("mu", r"\mu"),
    ("Psi", r"\Psi"),
    ("m", "m"),
    ("g_wd", r"g_{\mathrm{wd}}"),
    ("s_hat", r"\hat{s}"),
    ("theta_tilde", r"\tilde{\theta}"),
    ("grad_N", r"\mathrm{grad}_{N}"),
    ("rho_t", r"\rho_{t}"),
    ("a_1_1", "a_{1,1}"),
    ("momentum_buffer_new", r"\mathrm{momentum\_buffer}_{t+1}"),
    ("m_k_new", "m_{k,t+1}"),
    ("S1_new", "S_{1,t+1}"),
    ("s_max_new", r"s_{\mathrm{max},t+1}"),
])
def test_names(name, tex):
    assert name_tex(name) == tex


def test_bold_names_of_matrices():
    assert name_tex("S", bold=True) == r"\mathbf{S}"
    assert name_tex("Psi_new", bold=True) == r"\boldsymbol{\Psi}_{t+1}"
    assert latex(X) == r"\mathbf{X}"


@pytest.mark.parametrize("written, tex", [                # names as rules write them into symbol_names
    ("lr", r"\mathrm{lr}"),
    ("alpha", r"\alpha"),
    ("momentum_buffer_{t+1}", r"\mathrm{momentum\_buffer}_{t+1}"),
    ("s_max_{t+1}", r"s_{\mathrm{max},t+1}"),
    ("m_{1,t+1}", "m_{1,t+1}"),
    (r"\mathbf{m1}", r"\mathbf{m}_{1}"),
    (r"\mathbf{m_{1}}'", r"\mathbf{m}_{1}'"),
    (r"\mathbf{Psi}_{t+1}", r"\boldsymbol{\Psi}_{t+1}"),
    ("{lam}'", r"{\mathrm{lam}}'"),
    (r"\hat{g}_{old}", r"\hat{g}_{\mathrm{old}}"),
    (r"\lambda^{(1)}_{t+1}", r"\lambda^{(1)}_{t+1}"),
])
def test_symbol_names_written_by_rules(written, tex):
    assert fix_name_tex(written) == tex


def test_time_index_is_one_subscript_with_the_derivations_names():
    b_new = sp.Symbol("momentum_buffer_new")
    assert latex(b_new) == r"\mathrm{momentum\_buffer}_{t+1}"
    assert latex(b_new, {b_new: "momentum_buffer_{t+1}"}) == r"\mathrm{momentum\_buffer}_{t+1}"
    assert latex(m + lr * b_new, {lr: "lr"}) == r"\mathrm{lr} \cdot \mathrm{momentum\_buffer}_{t+1} + m"


@pytest.mark.parametrize("expr, tex", [
    (ess * mh, r"\mathrm{ess} \cdot \mathrm{momentum\_hat}"),
    (g + m * wd, r"g + m \cdot \mathrm{weight\_decay}"),
    (-lr * g + m, r"- g \cdot \mathrm{lr} + m"),
    (2 * lr, r"2 \cdot \mathrm{lr}"),
    (2 * m * g, "2 g m"),
    (lr * (g + m), r"\mathrm{lr} \cdot \left(g + m\right)"),
    (sp.Symbol("beta1") ** t, r"\beta_{1}^{t}"),
    (-lr * sp.MatrixSymbol("g", 3, 1), r"- \mathrm{lr} \cdot \mathbf{g}"),
])
def test_products(expr, tex):
    assert latex(expr) == tex


@pytest.mark.parametrize("expr, tex", [
    (sp.Piecewise((g, sp.Eq(t, 1)), (m, True)),
     r"\begin{cases} g & \text{if } t = 1 \\ m & \text{otherwise} \end{cases}"),
    (sp.Piecewise((g, price), (m, True)),
     r"\begin{cases} g & \text{if } \mathrm{hess\_approx} = \text{price} \\ m & \text{otherwise} \end{cases}"),
    (sp.Piecewise((g, sp.And(nesterov, sp.Not(price))), (m, sp.Ne(wd, 0)), (lr, True)),
     r"\begin{cases} g & \text{if } \mathrm{nesterov} \text{ and } \mathrm{hess\_approx} \neq \text{price} \\ "
     r"m & \text{if } \mathrm{weight\_decay} \neq 0 \\ \mathrm{lr} & \text{otherwise} \end{cases}"),
    (sp.Not(nesterov), r"\text{not } \mathrm{nesterov}"),
])
def test_conditions(expr, tex):
    assert latex(expr) == tex


def test_special_functions():
    assert latex(sp.Determinant(-2 * X)) == r"\det\left(- 2 \mathbf{X}\right)"
    assert latex(sp.polygamma(0, a)) == r"\psi\left(a\right)"
    assert latex(sp.polygamma(1, a)) == r"\psi'\left(a\right)"
    assert latex(sp.Function("grad_full")(m)) == r"\operatorname{grad\_full}{\left(m \right)}"


def test_tex_forms_are_filled_in_by_the_printer():
    form = TexForm(r"\frac{1}{S}\sum_k %s", (sp.Symbol("loss_k") * sp.Symbol("r"),))
    assert form.render(latex) == r"\frac{1}{S}\sum_k \mathrm{loss}_{k} \cdot r"


@pytest.mark.parametrize("expr, text", [
    (sp.Piecewise((g, sp.Eq(t, 1)), (m, True)), "g if t == 1 else m"),
    (sp.Piecewise((sp.Piecewise((g, nesterov), (m, True)), sp.Ne(wd, 0)), (lr, True)),
     "(g if nesterov else m) if weight_decay != 0 else lr"),
    (2 * sp.Piecewise((g, price), (m, True)), "2*(g if hess_approx == 'price' else m)"),
    (sp.And(nesterov, sp.Not(price)), "nesterov and hess_approx != 'price'"),
    (sp.Not(nesterov), "not nesterov"),
    (sp.Eq(t, 1), "t == 1"),
    (sp.Eq(sp.Mod(t, a), 0), "t % a == 0"),
    (2 * sp.Mod(t + 1, a * m), "2*((t + 1) % (a*m))"),
    (sp.Determinant(-2 * X), "det(-2*X)"),
    (sp.Trace(X), "tr(X)"),
    (sp.polygamma(0, a) - sp.polygamma(0, a + t), "digamma(a) - digamma(a + t)"),
    (sp.polygamma(1, a), "trigamma(a)"),
    (m ** 2, "m^2"),
    ((2 * sp.pi) ** (-sp.Symbol("P") / 2), "(2*pi)^(-P/2)"),
    (1 / m, "1/m"),
    (sp.sqrt(m), "sqrt(m)"),
    (sp.Max(m, g), "max(g, m)"),
    (sp.Sum(sp.loggamma(a - sp.Symbol("j")), (sp.Symbol("j"), 1, sp.Symbol("P"))),
     "sum(loggamma(a - j) for j in 1..P)"),
    ("already text", "already text"),
])
def test_pretty(expr, text):
    assert pretty(expr) == text
