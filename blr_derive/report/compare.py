"""``blr-derive compare A B``: what separates two algorithms (the Table 1 view of Khan & Rue 2023)."""
from __future__ import annotations

import os

from blr_derive.core.pretty import pretty
from blr_derive.core.text import Prose, plain
from blr_derive.derive.driver import derive_file
from blr_derive.rules.base import RULES


def _approx_words(a):
    args = ", ".join(f"{k}: {v}" for k, v in a.args.items())
    return f"{a.name}" + (f" {{{args}}}" if args else "")


def _rule_words(name):
    """The rule's equation and summary; a convention says it is a peer's convention, not a BLR step."""
    r = RULES[name]
    tag = "convention, not a consequence of the BLR; " if r.kind == "convention" else ""
    return f"({tag}{r.equation}: {r.summary})"


def _structure(r) -> str:
    """The recipe's candidate-structure sections (the family's variable laid out as a matrix, a basis, federated
    sites, a stored posterior), in words; 'none' for a plain family."""
    parts = []
    for key, what in (("kronecker", "matrix-normal"), ("eigenbasis", "diagonal in a Kronecker eigenbasis")):
        sec = getattr(r, key, None)
        if sec is not None:
            parts.append(f"{key} ({what}, {sec.rows} x {sec.cols})")
    if getattr(r, "federated", None) is not None:
        parts.append("federated (Bayesian ADMM sites)")
    if getattr(r, "correction", None) is not None:
        parts.append("posterior_correction (a stored posterior)")
    return ", ".join(parts) or "none"


def compare_recipes(path_a, path_b) -> str:
    ra, Da = derive_file(path_a)
    rb, Db = derive_file(path_b)
    lines = [f"compare {ra.name} ({plain(ra.title)}) with {rb.name} ({plain(rb.title)})", ""]
    same_family = ra.family.name == rb.family.name
    lines.append(f"candidate family: {ra.family.name}" + (" (both)" if same_family else f" vs {rb.family.name}"))
    sa, sb = _structure(ra), _structure(rb)
    lines.append(f"candidate structure: {sa}" + (" (both)" if sa == sb else f" vs {sb}"))
    la = ra.loss_kind if ra.loss_kind == "abstract" else f"explicit: {pretty(ra.loss)}"
    lb = rb.loss_kind if rb.loss_kind == "abstract" else f"explicit: {pretty(rb.loss)}"
    lines.append(f"loss: {la}" + (" (both)" if la == lb else f" vs {lb}"))
    # pair the k-th use of a rule in A with the k-th use in B (a rule may be named more than once)
    def keyed(r):
        seen, out = {}, {}
        for a in r.approximations:
            seen[a.name] = seen.get(a.name, 0) + 1
            out[(a.name, seen[a.name])] = a
        return out
    ka, kb = keyed(ra), keyed(rb)
    shared = list(dict.fromkeys(a.name for k, a in ka.items() if k in kb))
    only_a = [a for k, a in ka.items() if k not in kb]
    only_b = [b for k, b in kb.items() if k not in ka]
    changed = [(ka[k], kb[k]) for k in ka if k in kb and ka[k].args != kb[k].args]
    lines.append(f"shared approximations: {', '.join(shared) or 'none'}")
    lines.append("")
    lines.append(f"to go from {ra.name} to {rb.name}:")
    if not same_family:
        lines.append(f"  - change the candidate family {ra.family.name} -> {rb.family.name}")
    for a in only_a:
        lines.append(f"  - remove {_approx_words(a)}  {_rule_words(a.name)}")
    for b in only_b:
        lines.append(f"  - add {_approx_words(b)}  {_rule_words(b.name)}")
    for a, b in changed:
        lines.append(f"  - change {_approx_words(a)} -> {_approx_words(b)}")
    family_differs = same_family and _family_text(ra.family) != _family_text(rb.family)
    if family_differs:              # two families that share a name (a user's copy of a built-in, edited)
        fa, fb = (plain(Prose(os.path.basename(str(f.file)))) if f.file else "built-in"
                  for f in (ra.family, rb.family))
        lines.append(f"  - change the declaration of family {ra.family.name} ({fa} -> {fb}: its statistics, natural "
                     "parameters or log-partition differ)")
    order_a = [a.name for a in ra.approximations]
    order_b = [b.name for b in rb.approximations]
    if not only_a and not only_b and order_a != order_b:
        lines.append(f"  - reorder the approximations ({', '.join(order_a)} -> {', '.join(order_b)}): rules apply in order")
    if same_family and not only_a and not only_b and not changed and la == lb and not family_differs \
            and order_a == order_b:
        same = list(Da.update_lines(pretty)) == list(Db.update_lines(pretty))
        lines.append("  - nothing: the recipes derive the same update" if same else
                     "  - nothing in the recipes' rules, but the derived updates differ (below): hyperparameter "
                     "defaults, state_init or data")
    lines.append("")
    for r, D in ((ra, Da), (rb, Db)):
        lines.append(f"{r.name} update:")
        lines += [f"  {l}" for l in D.update_lines(pretty)]
    return "\n".join(lines) + "\n"


def _family_text(fam) -> tuple:
    """What a family's derivations depend on, as text: two families with one name compare by their content."""
    return (str(fam.T), str(fam.h), str(fam.eta), str(fam.A), str(fam.support))
