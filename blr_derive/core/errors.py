"""Error types.  Every user-facing problem with an input file is a :class:`SpecError`
carrying the file, the line and a one-line message; the CLI prints it and exits 2."""
from __future__ import annotations


def printable(text) -> str:
    """``text`` with every non-printable character (line breaks, separators, control characters) written as its
    backslash escape, as :func:`blr_derive.core.text.quote` writes them."""
    s = str(text)
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in s)


class BLRError(Exception):
    """Base class of all errors raised by blr-derive."""


class SpecError(BLRError):
    """A problem with a family or recipe declaration (untrusted input)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def located(self, file: str | None = None, line: int | None = None) -> "SpecError":
        """Fill in a location if the error does not have one yet."""
        if self.file is None:
            self.file = file
        if self.line is None:
            self.line = line
        return self

    def __str__(self) -> str:
        # a file name is untrusted text too (a catalog folder's, a family a recipe names): a line break in it would
        # end the one-line message before its line number and problem, a control character drive the terminal
        where = printable(self.file) if self.file else "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.message}"


class TimeLimitExceeded(SpecError):
    """A derivation ran past its wall-clock budget (the API's ``time_limit``; the CLI's ``--time-limit``)."""


class DerivationError(BLRError):
    """The engine cannot carry out a derivation step (e.g. a rule does not apply)."""


class CodegenError(BLRError):
    """A target cannot print an expression or render an update.  ``key`` names the recipe entry responsible
    (``family``, ``approximations``, ``loss``, ``state_init``, ``parameter``) so that the error can be located."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


class UnsupportedTarget(CodegenError):
    """The target cannot express this recipe at all (e.g. the torch target needs an elementwise update);
    ``blr-derive catalog`` skips such pairs, every other CodegenError is a failure."""


class LocatedCodegenError(SpecError, CodegenError):
    """A :class:`CodegenError` located in the recipe (file and line of the entry responsible)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None, key: str | None = None):
        SpecError.__init__(self, message, file, line)
        self.key = key


class LocatedUnsupportedTarget(LocatedCodegenError, UnsupportedTarget):
    """An :class:`UnsupportedTarget` located in the recipe."""
