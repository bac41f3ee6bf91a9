"""blr-derive: derive learning algorithms with the Bayesian learning rule.

Pipeline (Khan & Rue, JMLR 2023): spec parsing → :class:`~blr_derive.families.model.Family`
(λ, μ, A, entropy, Fisher) → expectation/gradient rules → BLR step (Eq. 6) and
approximation passes → :class:`~blr_derive.rules.base.Derivation` → update IR →
code generation (``codegen``).
"""
__version__ = "0.1.0"
