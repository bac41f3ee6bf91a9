"""What :func:`blr_derive.testing.equivalent` returns: a :class:`Report`, with the first :class:`Divergence`
when the optimizer is not the recipe's derivation (printed on one screen by ``blr-derive verify``)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Divergence:
    problem: str
    dtype: str
    setting: dict
    step: int                           # 1-based
    parameter: int                      # index in the problem's parameter list
    variable: str                       # the user's name: "parameter", a state key, or "constructor"
    yours: str
    derived: str
    assignment: str = ""                # "s ← beta2*s + g^2*(1 - beta2)" (the first that differs on your state)
    rules: list = field(default_factory=list)          # [(rule, equation)] that produced it
    definitions: list = field(default_factory=list)    # [(name = expression, rule, equation)] it reads
    localized: bool = False             # the assignment was found by evaluating the derived step on your state
    note: str = ""                      # what the problem did before this step (a reload, a skipped gradient)

    def lines(self) -> list:
        setting = ", ".join(f"{k}={v!r}" for k, v in self.setting.items())
        out = [f"first divergence: problem '{self.problem}', {self.dtype}, step {self.step}, parameter {self.parameter}, "
               f"{'the parameter' if self.variable == 'parameter' else repr(self.variable)}",
               *([f"  ({self.note})"] if self.note else []),
               f"  hyperparameters: {setting}",
               f"  yours:   {self.yours}",
               f"  derived: {self.derived}"]
        if self.assignment:
            how = ("the first derived assignment whose value differs when the derived step is evaluated on your state "
                   "at that step:" if self.localized else "the derived assignment that produced the value:")
            out.append(f"  {how}")
            out.append(f"    {self.assignment}")
            for rule, eq in self.rules:
                out.append(f"      from rule {rule} ({eq})")
            for d, rule, eq in self.definitions:
                out.append(f"    where {d}" + (f"    [rule {rule}, {eq}]" if rule else ""))
        return out


@dataclass
class Report:
    recipe: str
    optimizer: str
    equal: bool
    steps_checked: int = 0
    runs: int = 0
    divergence: Divergence | None = None
    skipped: list = field(default_factory=list)        # settings or problems not exercised, and why
    nothing_compared: bool = False                      # no run at all: not equal, for want of evidence

    def __bool__(self):
        return self.equal

    def __str__(self):
        head = (f"{self.optimizer} {'equals' if self.equal else 'is NOT'} the BLR derivation of recipe "
                f"'{self.recipe}'")
        if self.nothing_compared:
            head = (f"{self.optimizer} was NOT compared with the BLR derivation of recipe '{self.recipe}': no setting "
                    "ran (each was refused by both optimizers or not exercised)")
        lines = [head, f"  {self.runs} runs, {self.steps_checked} steps compared (float64 and float32 within the "
                       "dtype's tolerance)" if self.equal else ""]
        if self.divergence is not None:
            lines += ["  " + l for l in self.divergence.lines()]
        if self.skipped:
            lines.append(f"  not exercised: {'; '.join(self.skipped[:6])}{' ...' if len(self.skipped) > 6 else ''}")
        return "\n".join(l for l in lines if l)
