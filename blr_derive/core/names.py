"""Which names a recipe or family may declare (principle 4: recipe text reaches generated code only as a
validated identifier).

Every name a user declares (family, variable, components, dimension, parameters, hyperparameters and
their tuple elements and choices, data and their dimensions, sizes, blocks, state named by passes, the
recipe and its ``class_name``) becomes a Python identifier in generated code.  It must be

* ASCII: ``[A-Za-z][A-Za-z0-9_]*``, at most :data:`MAX_NAME` characters (no Unicode look-alikes, which
  Python would NFKC-normalize into other names; no leading underscore, which is the generated code's own
  namespace for its temporaries);
* not a Python keyword (hard or soft) and not a builtin (``sum``, ``len``, ``print`` ...);
* not one of the names the generated modules themselves bind (:data:`RESERVED`: ``numpy``, ``torch``,
  ``state``, ``step``, ``self``, ``params`` ...; ``tests/unit/core/test_name_policy.py`` recomputes them from every
  catalog artifact and target, so the list cannot fall behind the templates);
* not one of the derivation's own symbol names (:data:`ENGINE_PATTERNS`: ``lambda1``, ``mu2``, the CSE
  temporaries ``t_0`` ...), which would silently merge with the user's symbol in sympy.

Names the derivation introduces later (``g``, ``m_new``, ``u``) are checked against the declared ones when the
update IR is built (:func:`blr_derive.ir.build.build_ir`), so a clash is a located error, never a merged symbol.
"""
from __future__ import annotations

import builtins
import keyword
import re

from blr_derive.core.errors import SpecError
from blr_derive.core.text import quote
from blr_derive.core.yamlio import where

MAX_NAME = 64
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

#: names bound by the generated modules (module constants and functions, public parameters, and the locals
#: of every function in which user names are bound); tests/unit/core/test_name_policy.py keeps this list complete
RESERVED = frozenset("""
    numpy scipy math torch triton tl contextlib copy warnings
    RECIPE FAMILY ENGINE_VERSION STATE HYPERPARAMETERS REQUIRED_STATE ORACLES DATA EQUATIONS SHAPES SYMMETRIC
    CHECK_DOMAINS objective OBJECTIVE_KEYS OBJECTIVE_ESTIMATE OBJECTIVE_BOUND
    LAMBDA BLOCK BLOCKS COLLECT FIRST NPTR PDT PLATE_DATA LOCAL_OUTPUTS
    FEDERATED_GLOBALS FEDERATED_DUALS FEDERATED_MESSAGES FEDERATED_EQUATIONS
    SENSITIVITY_INPUTS SENSITIVITY_OUTPUTS SENSITIVITY_EQUATIONS sensitivities
    init step parameter natural_parameters expectation_parameters fisher_information ordinary_from_natural
    log_partition
    ordinary_from_expectation client_data init_dual dual_step client_message server_step global_objective
    GLOBAL_OBJECTIVE_KEYS client_loss_sum
    state oracles data rng hyperparameters
    self params closure train fused sync foreach maximize capturable differentiable defaults group groups
    param_groups state_dict load_state_dict zero_grad add_param_group sampled_params noise
    hp unknown missing required out name value n_samples loss losses samples acc states drawn saved flat
    host dtype device world dist floats flags chunks pointers ptrs buckets mean eta global_state clients
    message_sum dual param_init param_new
    MEAN init_state
""".split())

#: names no generated module may mention (the modules of code execution, files and the environment that the audit of
#: every rendered module refuses, codegen/inert.py FORBIDDEN_NAMES, besides builtins): a hyperparameter ``os`` is
#: refused where it is declared, not by the audit after the derivation (tests/unit/core/test_name_policy.py keeps
#: the two lists in step)
FORBIDDEN_MODULES = frozenset("""
    os sys subprocess shutil socket importlib builtins pickle marshal ctypes pathlib io
""".split())

#: symbol names the derivation creates for itself (natural and expectation parameters and their gradients,
#: the step counter t, common-subexpression temporaries t_0, t_1, ..., and the names it derives from declared
#: ones: m_new, m_list, X_rows, m_prev, m_all)
ENGINE_PATTERNS = (
    re.compile(r"(lambda|mu|grad_mu|d_lambda|d_mu|dlam|fisher)\d+(_next)?\Z"),
    re.compile(r"t(_\d+)?\Z"),
    re.compile(r".+_(new|list|rows|prev|next|all)\Z"),  # the new value, tensor list, data rows, array over
                                                        # the components ... of a name
)

_BUILTINS = frozenset(dir(builtins))


#: how a declared name is used: ``symbol`` (a variable in generated code), ``prefix`` (the start of such names,
#: e.g. a factorized block), ``label`` (only ever quoted as text or data, e.g. a family or recipe name)
SCOPES = ("symbol", "prefix", "label")


def name_problem(name, scope: str = "symbol") -> str | None:
    """Why ``name`` cannot be declared for ``scope`` (see :data:`SCOPES`), or None when it can."""
    if not isinstance(name, str):
        what = ("a mapping" if isinstance(name, dict) else "a list" if isinstance(name, (list, tuple))
                else "a number" if isinstance(name, (int, float)) else type(name).__name__)
        return f"a name must be a string, got {what}"
    if len(name) > MAX_NAME:
        return f"names are at most {MAX_NAME} characters"
    if not _IDENT.match(name):
        return (f"'{quote(name)}' is not a name: ASCII letters, digits and underscores, starting with a letter "
                "(e.g. weight_decay)")
    if scope == "label":
        return None
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"'{name}' is a Python keyword"
    if name in _BUILTINS:
        return f"'{name}' is a Python builtin"
    if name in RESERVED:
        return f"'{name}' is reserved by the generated code"
    if name in FORBIDDEN_MODULES:
        return f"'{name}' is a module name the generated code may never mention"
    if scope == "symbol" and any(p.match(name) for p in ENGINE_PATTERNS):
        return f"'{name}' is reserved for the derivation's own symbols"
    return None


def check_name(name, what: str, file=None, line=None, scope: str = "symbol") -> str:
    """``name`` if it may be declared, else a located :class:`SpecError` naming ``what`` it was for."""
    problem = name_problem(name, scope)
    if problem is not None:
        raise SpecError(f"{what}: {problem}; choose another name", file, line)
    return name


def check_name_at(name, what: str, container, key=None, scope: str = "symbol") -> str:
    """:func:`check_name` located at ``container[key]`` (an LDict/LList entry)."""
    if name_problem(name, scope) is None:
        return name
    f, l = where(container, key)
    return check_name(name, what, f, l, scope)
