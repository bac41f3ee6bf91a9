"""``docs/recipes.md``: the recipe and family file formats, every key and every rule's arguments.

    python -m blr_derive.report.recipe_docs > docs/recipes.md

The keys come from the spec layer's key sets (``RECIPE_KEYS``, ``LOSS_KEYS``, ``HP_KEYS``, ``PEER_KEYS``,
``FAMILY_KEYS``, ``PARAM_KEYS`` ...), each described by the tables below (a key without a description is an
error, so a new key cannot go undocumented); the rules come from the registry (name, kind, equation, summary)
and their arguments from their source (:mod:`blr_derive.report.rule_args`).  ``tests/unit/report/
test_recipe_docs.py`` checks that the committed file is what this module writes."""
from __future__ import annotations

import sys

from blr_derive.report.rule_args import rule_arguments
from blr_derive.rules import load_all
from blr_derive.rules.base import KINDS, RULES
from blr_derive.spec.correction import CORRECTION_KEYS
from blr_derive.spec.federated import FED_KEYS
from blr_derive.spec.hyper import DATA_KEYS, HP_KEYS
from blr_derive.spec.kronecker import KRONECKER_KEYS
from blr_derive.spec.mixture import MIXTURE_KEYS
from blr_derive.spec.peer import CHECK_KEYS, PEER_KEYS, SWITCH_KEYS
from blr_derive.spec.components import COMPONENTS_KEYS
from blr_derive.spec.product import BLOCK_KEYS, FACTOR_KEYS, FACTORIZED_KEYS, PLATE_KEYS
from blr_derive.spec.recipe import LOSS_KEYS, RECIPE_KEYS
from blr_derive.spec.vocabulary import FAMILY_KEYS, PARAM_KEYS, VARIABLE_KEYS

# (key, required, meaning) in the order shown
RECIPE_DOC = [
    ("name", "yes", "identifier; names the generated module's `RECIPE`"),
    ("title", "no", "one line, carried into `explain` and the generated header"),
    ("description", "no", "text, carried into `explain` and the generated header"),
    ("class_name", "no", "a CamelCase name for the algorithm: the generated torch optimizer's class"),
    ("paper", "no", "the section and equations of Khan & Rue (2023) the algorithm corresponds to"),
    ("checked_against", "no", "what the generated code is tested against (`catalog/README.md`)"),
    ("family", "yes", "a built-in family name (`gaussian_diag`), a path to a family file (relative to the recipe), "
                      "an inline family mapping (keys below), `{name: F, K: 4}` for a sized family, or a mixture "
                      "`{mixture: F, components: K, ...}` (keys below)"),
    ("loss", "yes", "`abstract` (known through oracles: `grad`, `hess`, `loss`), an expression of the family's "
                    "variable, or a mapping (keys below)"),
    ("approximations", "no", "the rules applied, in order: each a rule name or `{rule: {argument: value}}` "
                             "(rules and their arguments below)"),
    ("hyperparameters", "no", "`name: {default: ..., ...}` or `name: number` (declaration keys below); they become "
                              "constructor arguments of torch optimizers and keyword arguments of numpy `step`"),
    ("learning_rate", "no", "the hyperparameter that is the BLR learning rate ρ (default `rho`, added with "
                            "default 1.0 when not declared)"),
    ("state_init", "no", "initial values of state, as expressions of hyperparameters (`{s: 0}`)"),
    ("parameter", "no", "what the model's weights hold in targets that own them (torch), an expression of the "
                        "family's parameters, e.g. `binary(lam)`; default the Gaussian mean"),
    ("peer", "no", "how a generated optimizer presents itself to the hand-written one it mirrors (keys below)"),
    ("federated", "no", "federated Bayesian ADMM: the penalties and the prior's site (keys below)"),
    ("posterior_correction", "no", "the old posterior q_old and its sites, read by the approximation "
                                   "`posterior_correction` (keys below; default: `{p: p_old}` for every free "
                                   "parameter, `sites: gradient`)"),
    ("sizes", "no", "size parameters of a templated recipe, `{K: {default: 3, min: 2, max: 16}}` (`--size K=4`)"),
]
LOSS_DOC = [
    ("kind", "no", "`abstract` or `explicit`"),
    ("expression", "for explicit losses", "the loss: an expression of the family's variable, hyperparameters and data"),
    ("data", "no", "the data the expression names: `NAME: {shape: [N, P], description: ...}` (keys below)"),
    ("description", "no", "one line of text"),
]
HP_DOC = [
    ("default", "unless `required`", "a finite number, a boolean (a flag), a pair (with `names`) or one of `choices`"),
    ("description", "no", "one line of text (the generated docstring)"),
    ("names", "for tuples", "the element names of a tuple default: `betas: {default: [0.9, 0.999], names: "
                            "[beta1, beta2]}`; expressions use the element names"),
    ("type", "no", "`int` for counts (default: a float)"),
    ("choices", "no", "the allowed strings of a choice; conditions compare with them (`hess_approx == 'price'`)"),
    ("required", "no", "`true`: no default, the caller must give it (required ones come first)"),
    ("allow_infinite", "no", "`true`: the default may be `.inf`"),
    ("keyword_only", "no", "`true`: after `*` in the torch constructor"),
]
DATA_DOC = [
    ("shape", "no", "default `[]`: `[]` scalar, `[N]` vector, `[N, P]` matrix (dimension names; the family's own "
              "is `P`)"),
    ("description", "no", "one line of text"),
    ("symmetric", "no", "`true` for a symmetric (covariance-like) matrix"),
    ("default", "no", "abstract losses only: the value, an expression of hyperparameters, a target that keeps the "
                      "data as per-parameter state (torch) starts from (`s_past: {shape: [], default: ess*weight_decay}`)"),
]
PEER_DOC = [
    ("state_names", "no", "`{u: exp_avg, s: exp_avg_sq}`: the keys in `optimizer.state[p]`, so checkpoints move "
                          "both ways"),
    ("counts_steps", "no", "`true`: keep a per-parameter `step` even where the update does not read it"),
    ("validate", "no", "a list of `{require: CONDITION, message: TEXT}` checked by the constructor "
                       "(`ValueError(TEXT)`; `{name}` in TEXT shows a hyperparameter's value); without it, numeric "
                       "hyperparameters must not be negative, except one whose declared default is negative"),
    ("switches", "no", "`{positional: [...], keyword: [...]}`: torch's maximize, foreach, capturable, differentiable, "
                       "fused, placed as the peer's constructor has them"),
    ("group_entries", "no", "`{name: true}`: constant param-group entries (AdamW's `decoupled_weight_decay`)"),
    ("eager_state", "no", "`true`: state created by the constructor (Adagrad's)"),
    ("sparse_gradients", "no", "`{densify: true, validate: [...]}`: sparse gradients taken as the dense gradient "
                               "they stand for; the checks raise `RuntimeError` at the step"),
]
SWITCH_DOC = [("positional", "no", "switches accepted positionally, in order"),
              ("keyword", "no", "switches accepted as keywords only")]
CHECK_DOC = [("require", "yes", "a condition on the hyperparameters"),
             ("message", "yes", "the error text (`{name}` shows a hyperparameter's value)"),
             ("targets", "no", "the optimizer targets that make the check (`[jax]`: a name optax reads otherwise, "
                               "Adam's `amsgrad`); default every optimizer target")]
MIXTURE_DOC = [
    ("mixture", "yes", "the component family (Gaussian)"),
    ("components", "yes", "the number of components: an integer 2..9 (one state variable per component, `m1`, `S1`, "
                          "...), or a size name `K`: the components as an array axis, K the length of the state "
                          "arrays at run time (`m` of shape (K, P), `S` (K, P, P)), equal weights, derived once"),
    ("weights", "no", "`[w1, ..., w(K-1)]`, numbers or hyperparameters (the last is 1 minus their sum); default equal"),
    ("fixed", "no", "`{k: {param: value}}`: a fixed component, e.g. dropout's spike `{2: {m: 0, s: s0}}`"),
    ("description", "no", "one line of text"),
]
KRONECKER_DOC = [
    ("rows", "yes", "the dimension name of W's rows (d_out; G is rows × rows); the state is M, A, G, the oracles "
                    "`grad` (rows × cols), `activations` a and `output_grads` b"),
    ("cols", "yes", "the dimension name of W's columns (d_in; A is cols × cols); with `family: gaussian_full` the "
                    "candidate is MN(M, A⁻¹, G⁻¹), vec(W) ~ N(vec M, (A ⊗ G)⁻¹), and the full-Gaussian BLR is "
                    "written in M, A, G by the rules `kronecker_gauss_newton`, `factored_tikhonov`, `kronecker_ema`"),
]
CORRECTION_DOC = [
    ("old", "no", "q_old: the data names of its parameters, `{m: m_old, s: s_old}` (default `<p>_old`)"),
    ("sites", "no", "the sum of q_old's sites: `gradient` (the full-data gradient and Hessian at q_old: data "
                    "`grad_full`, `hess_full`) or `posterior` (q_old itself: −log q_old)"),
    ("estimates", "no", "the estimates the correction replaces: `[grad, hess]` (default) or `[grad]` (E_q[∇ℓ] only: "
                        "g_B(q) − g_B(q_old) + the stored full-data gradient, the Hessian estimate the batch's own, "
                        "no `hess_full`; needs `sites: gradient`)"),
    ("description", "no", "the source of the correction, shown by `explain`"),
]
FED_DOC = [
    ("penalty", "yes", "ρ (a hyperparameter): the client objective E_q[ℓ_k] + <η_k, μ> + ρ KL(q ‖ q_g)"),
    ("server_penalty", "no", "ρ_s: 0 = the server sums the sites (Eq. 60); ρ = ADMM's augmented term"),
    ("prior", "no", "ℓ_0: the prior's site at the server, an expression of the variable"),
    ("damping", "no", "d (a hyperparameter; default 1): the dual step η_k ← η_k + dρ(λ_k − λ_g)"),
    ("temperature", "no", "τ (a hyperparameter; default 1): the clients' losses enter as ℓ_k/τ (a tempered "
                          "posterior ∝ p_0 Π_k exp(−ℓ_k/τ); the prior is not tempered)"),
    ("description", "no", "which algorithm these penalties make and its source: a step of the derivation before the "
                          "client objective, shown by `explain`"),
]
FACTORIZED_DOC = [
    ("name", "yes", "identifier; names the generated module's `RECIPE`"),
    ("title", "no", "one line, carried into `explain` and the generated header"),
    ("description", "no", "text, carried into `explain` and the generated header"),
    ("class_name", "no", "a CamelCase name for the algorithm"),
    ("paper", "no", "the section and equations of Khan & Rue (2023) the algorithm corresponds to"),
    ("checked_against", "no", "what the generated code is tested against (`catalog/README.md`)"),
    ("blocks", "yes", "the factors of the mean-field candidate q = Π_b q_b (Eq. 55), updated in the order declared: "
                      "`NAME: {...}` (block keys below)"),
    ("factors", "yes", "the terms of the loss, −log p(data, θ) = Σ_f factor_f: `NAME: {expression: ..., ...}` "
                       "(factor keys below)"),
    ("dimension", "for vector and matrix blocks", "the dimension name of vector and matrix blocks and data, e.g. "
                                                  "`P` (one name)"),
    ("plate", "with local blocks or per-row data", "the rows of the data set: `{index: n, data: {...}, "
                                                   "minibatch: N}` (plate keys below)"),
    ("components", "no", "`{index: k, size: K}`: the mixture components as an array axis of run-time length K "
                         "(components keys below); blocks and factors with `components: true` are written for one "
                         "generic component k"),
    ("hyperparameters", "no", "`name: {default: ..., description: ..., type: int}` (numbers only)"),
    ("data", "no", "global data (not per row): `NAME: {shape: [...], description: ...}`"),
    ("sizes", "no", "size parameters of a templated recipe, `{K: {default: 3, min: 2, max: 16}}` (`--size K=4`)"),
]
BLOCK_DOC = [
    ("approximations", "yes", "`[exact]`: an exponential-family block that takes the BLR step of Eqs. 58–60; "
                              "`[delta]`: a point estimate (q = N(θ_t, I)) that jumps to its stationary point, the "
                              "M-step of Sec. 5.2"),
    ("family", "for `exact` blocks", "the block's family: a built-in name, a path, an inline mapping, or "
                                     "`{name: F, K: 4}` for a sized family"),
    ("variable", "for `delta` blocks", "`{shape: scalar|vector|matrix, symmetric: true}`, `{components: [a, b]}` "
                                       "(several scalars) or `{simplex: true}` (a point on the simplex over the "
                                       "components)"),
    ("local", "no", "`true`: one copy per row of the `plate`, recomputed every step with ρ = 1 (the E-step)"),
    ("learning_rate", "no", "ρ_b: a number, a hyperparameter or `{robbins_monro: {delay, forgetting}}` (default 1; "
                            "local and delta blocks need 1)"),
    ("messages", "no", "`true`: keep one natural parameter per factor as state, each smoothed with ρ "
                       "(the message form of Eq. 60)"),
    ("components", "no", "`true`: one copy of the block per component (needs the recipe's `components`)"),
    ("domain", "no", "accepted for older files and not read (a block's domain is its family's)"),
    ("description", "no", "one line of text"),
]
FACTOR_DOC = [
    ("expression", "yes", "the factor: an expression of the blocks' variables, hyperparameters and data"),
    ("plate", "no", "`true`: summed over the rows of the plate (it may name the plate's data and local blocks)"),
    ("components", "no", "`true`: written for one generic component k and summed over the components"),
    ("description", "no", "one line of text"),
]
PLATE_DOC = [
    ("data", "yes", "the per-row data: `NAME: {shape: [...], description: ...}` (shape of one row; default scalar)"),
    ("index", "no", "the row index's name (default `n`)"),
    ("minibatch", "no", "a hyperparameter N, the data-set size: the plate sums over a minibatch of B rows are "
                        "scaled by N/B (Sec. 5.3)"),
    ("description", "no", "one line of text"),
]
COMPONENTS_DOC = [
    ("size", "yes", "the size name K: the length of the component axis of the state arrays at run time"),
    ("index", "no", "the generic component's index name (default `k`)"),
    ("description", "no", "one line of text"),
]
FAMILY_DOC = [
    ("name", "yes", "identifier of the family"),
    ("description", "no", "one line of text"),
    ("reference", "no", "where in the paper the family appears"),
    ("variable", "yes", "the random variable: a name (scalar), or a mapping (keys below)"),
    ("dimension", "for vector and matrix variables", "the dimension symbol, e.g. `P`"),
    ("support", "no", "where θ lives (`real`, `positive`, `unit_interval`, `positive_definite`, ...; README)"),
    ("parameters", "yes", "the ordinary parameters: `name: {...}` (keys below)"),
    ("sufficient_statistics", "yes", "list of T_i(θ)"),
    ("base_measure", "no", "h(θ) (default `1`)"),
    ("natural_parameters", "yes", "list of λ_i(ordinary parameters), aligned with the statistics"),
    ("log_partition", "vector, matrix and simplex variables", "A(λ) in `lambda1, lambda2, ...`; otherwise derived "
                                                              "by integration or summation"),
    ("expectation_parameters", "no", "μ_i(ordinary), checked against the derived ∇A(λ)"),
    ("gaussian", "no", "`{mean: ..., covariance: ...}`: declares the family Gaussian (Bonnet, Price, delta, exact)"),
    ("elementwise", "no", "`true` for a mean-field family declared per scalar coordinate"),
    ("sampler", "no", "θ from draws `u`, `z` (an expression, or `{value, define, accept}`); enables the sampling "
                      "rules"),
    ("sizes", "no", "size parameters `{K: {default: 3, min: 2, max: 16}}`: the file is a template"),
    ("expected_log_base_measure", "no", "E_q[log h(θ)] in the ordinary parameters, where the engine finds none"),
    ("axis", "no", "the sized family for a generic coordinate k of a run-time K: `{parameter: {name, domain, mean}, "
                   "statistic, natural_parameter, log_partition: {each, total, of_total}}`, A(λ) = Σ_k each(λ_k) + "
                   "of_total(Σ_k total(λ_k)); a recipe with `components: {index: k, size: K}` next to the family "
                   "derives once, whatever K is (`blr_derive/families/axis.py`)"),
]
PARAM_DOC = [
    ("shape", "no", "`scalar`, `vector` or `matrix`"),
    ("domain", "no", "`real`, `positive`, `unit_interval`, `positive_definite`, ... (README)"),
    ("fixed", "no", "`true`: known, not updated (e.g. S in `gaussian_fixed_precision`)"),
    ("description", "no", "one line of text"),
    ("greater_than", "no", "a lower bound (an expression of the other parameters)"),
]
VARIABLE_DOC = [
    ("name", "unless `components`", "the variable's name"),
    ("shape", "no", "`scalar`, `vector` or `matrix`"),
    ("size", "no", "a fixed size K of a vector (components `theta1` ... `thetaK`)"),
    ("components", "no", "several variables: names, or mappings with `name` and `shape`"),
]

#: (title, key set, description table, what the keys belong to)
SECTIONS = [
    ("Recipe keys", RECIPE_KEYS, RECIPE_DOC, "A recipe is a YAML mapping (`RECIPE_KEYS`, `blr_derive/spec/recipe.py`)."),
    ("Loss", LOSS_KEYS, LOSS_DOC, "`loss:` as a mapping (`LOSS_KEYS`)."),
    ("Hyperparameter declarations", HP_KEYS, HP_DOC, "`hyperparameters: {NAME: {...}}` (`HP_KEYS`, "
                                                     "`blr_derive/spec/hyper.py`)."),
    ("Data declarations", DATA_KEYS, DATA_DOC, "`loss: {data: {NAME: {...}}}` (`DATA_KEYS`)."),
    ("Peer", PEER_KEYS, PEER_DOC, "`peer:` (`PEER_KEYS`, `blr_derive/spec/peer.py`)."),
    ("Peer switches", SWITCH_KEYS, SWITCH_DOC, "`peer: {switches: {...}}` (`SWITCH_KEYS`)."),
    ("Peer checks", CHECK_KEYS, CHECK_DOC, "each entry of `peer: {validate: [...]}` (`CHECK_KEYS`)."),
    ("Mixture candidates", MIXTURE_KEYS, MIXTURE_DOC, "`family: {mixture: ...}` (`MIXTURE_KEYS`, "
                                                      "`blr_derive/spec/mixture.py`)."),
    ("Kronecker candidates", KRONECKER_KEYS, KRONECKER_DOC, "`kronecker: {rows: d_out, cols: d_in}` with "
                                                            "`family: gaussian_full`: a matrix-normal candidate for "
                                                            "one weight matrix (`KRONECKER_KEYS`, "
                                                            "`blr_derive/spec/kronecker.py`; catalog `noisy_kfac`)."),
    ("Federated", FED_KEYS, FED_DOC, "`federated:` (`FED_KEYS`, `blr_derive/spec/federated.py`)."),
    ("Posterior correction", CORRECTION_KEYS, CORRECTION_DOC, "`posterior_correction:` (`CORRECTION_KEYS`, "
                                                               "`blr_derive/spec/correction.py`; Khan 2025)."),
    ("Factorized recipes", FACTORIZED_KEYS, FACTORIZED_DOC, "A recipe with `blocks:` and `factors:` instead of "
                                                            "`family:` and `loss:` (`FACTORIZED_KEYS`, "
                                                            "`blr_derive/spec/product.py`; catalog `em_gmm`, `vmp`, "
                                                            "`svi`)."),
    ("Blocks", BLOCK_KEYS, BLOCK_DOC, "each entry of `blocks: {NAME: {...}}` (`BLOCK_KEYS`)."),
    ("Factors", FACTOR_KEYS, FACTOR_DOC, "each entry of `factors: {NAME: {...}}` (`FACTOR_KEYS`)."),
    ("Plate", PLATE_KEYS, PLATE_DOC, "`plate:` of a factorized recipe (`PLATE_KEYS`)."),
    ("Components axis", COMPONENTS_KEYS, COMPONENTS_DOC, "`components:` of a factorized recipe (`COMPONENTS_KEYS`, "
                                                         "`blr_derive/spec/components.py`)."),
    ("Family file keys", FAMILY_KEYS, FAMILY_DOC, "A family file, or an inline `family:` mapping (`FAMILY_KEYS`, "
                                                  "`blr_derive/spec/vocabulary.py`)."),
    ("Family parameters", PARAM_KEYS, PARAM_DOC, "`parameters: {NAME: {...}}` (`PARAM_KEYS`)."),
    ("Family variable", VARIABLE_KEYS, VARIABLE_DOC, "`variable:` as a mapping (`VARIABLE_KEYS`)."),
]

KIND_TEXT = {
    "identity": "exact steps, applied automatically (a recipe does not name them)",
    "expectation": "how E_q[∇ℓ], E_q[∇²ℓ] (or the natural gradient) are obtained; a recipe names at most one",
    "step": "changes of the BLR step itself",
    "pass": "rewrite the derived update program, in the order listed (consequences of the BLR)",
    "convention": "rewrite the update program: a peer optimizer's convention, not a BLR step",
    "mixture": "approximations of mixture candidates",
}


def missing_descriptions() -> dict:
    """section title -> keys of its key set without a description (and descriptions of unknown keys)."""
    out = {}
    for title, keys, doc, _ in SECTIONS:
        described = {k for k, _, _ in doc}
        if described != set(keys):
            out[title] = sorted(set(keys) ^ described)
    return out


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _key_sections() -> list[str]:
    problems = missing_descriptions()
    if problems:
        raise ValueError(f"keys without a description (or described but unknown): {problems}")
    lines = []
    for title, _, doc, intro in SECTIONS:
        lines += [f"## {title}", "", intro, "", "| key | required | meaning |", "|---|---|---|"]
        lines += [f"| `{k}` | {_cell(req)} | {_cell(text)} |" for k, req, text in doc]
        lines.append("")
    return lines


def _arguments_cell(rule) -> str:
    args = rule_arguments(rule)
    if not args:
        return "—"
    parts = []
    for a in args:
        d = a.default_text()
        shown = d if d in ("required", "optional") else f"default `{d}`"
        parts.append(f"`{a.key}`: {a.type_text()} ({shown})")
    return "<br>".join(_cell(p) for p in parts)


def _rule_sections() -> list[str]:
    lines = ["## Rules", "",
             "Every rule in the registry (`blr_derive.rules.base.RULES`), by kind, with the arguments it reads "
             "(found in its source through `blr_derive/rules/args.py`'s `Ctx`). A recipe names a rule in "
             "`approximations` as `rule` or `{rule: {argument: value, ...}}`; an unknown argument is an error. "
             "Argument types:", "",
             "- *expression of hyperparameters*: a formula in the restricted grammar over the declared "
             "hyperparameters (and the step `t` where the update counts steps), e.g. `1 - beta2`;",
             "- *condition*: a comparison or a boolean hyperparameter, e.g. `when: momentum > 0`, "
             "`nesterov: nesterov` (a condition names a hyperparameter: a literal `true` is refused);",
             "- *positive integer or int hyperparameter*: a count such as `samples: 10` or `samples: mc_samples`;",
             "- *name*: an identifier (a parameter or state of the update, or the name of a state the rule adds);",
             "- `<parameter>`: the keys are the family's parameter names, e.g. `separate_learning_rates: "
             "{s: 1 - beta2}`.", ""]
    for kind in KINDS:
        rules = sorted((r for r in RULES.values() if r.kind == kind), key=lambda r: r.name)
        if not rules:
            continue
        lines += [f"### {kind} rules", "", _sentence(KIND_TEXT.get(kind, kind)), "",
                  "| rule | equation | arguments | what it does |", "|---|---|---|---|"]
        lines += [f"| `{r.name}` | {_cell(r.equation)} | {_arguments_cell(r)} | {_cell(r.summary)} |" for r in rules]
        lines.append("")
    return lines


def recipe_docs() -> str:
    """The text of ``docs/recipes.md``."""
    load_all()
    head = ["# Recipe format", "",
            "<!-- Generated by `python -m blr_derive.report.recipe_docs > docs/recipes.md`; do not edit. -->", "",
            "Every key of a recipe and of a family file, and every rule with its arguments and their types. "
            "The pages [Recipe format](recipe-format.md) and [Family file format](family-format.md) explain them "
            "with examples; "
            "`examples/05_writing_a_recipe.ipynb` writes a recipe step by step.", ""]
    return "\n".join(head + _key_sections() + _rule_sections()).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(recipe_docs())
    return 0


if __name__ == "__main__":
    sys.exit(main())
