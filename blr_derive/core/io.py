"""Writing output files safely (README, "Safety model"): only a regular file, or a new path, is ever replaced, and
it is replaced atomically (a temporary file in the same directory, renamed into place).  ``blr-derive catalog``
writes inside a folder it did not make (a cloned recipe repository): :func:`tree_problem` keeps its writes and
reads to the regular files and real folders below it."""
from __future__ import annotations

import os
import re
import shlex
import stat
import tempfile
from pathlib import Path

from blr_derive.core.errors import SpecError
from blr_derive.core.text import quote


#: the largest generated file ``catalog`` reads back to compare (the largest bundled artifact has 34 kB)
MAX_GENERATED_BYTES = 16 << 20


def tree_problem(root: Path, path: Path, folder: bool = False):
    """Why ``path``, below the folder ``root``, must not be written or read as a generated file (or, ``folder``,
    used as the folder of generated files): (the offending path, the problem), or None.  Every entry that exists
    on the way down from ``root`` (excluded: the folder the user named) must be a directory and not a symbolic
    link, and ``path`` itself a regular file (a directory for ``folder``) or absent: a link would carry a write
    to a file the user never named, a FIFO or a device would block or flood a read."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return Path(path), f"is outside the folder '{quote(root, 200)}'"
    here = Path(root)
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None                                 # created when written: a new folder, a new file
        except (OSError, ValueError) as exc:
            return here, f"cannot be checked ({getattr(exc, 'strerror', None) or type(exc).__name__})"
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            return here, ("is a symbolic link; generated files are written and read only as regular files inside the "
                          "catalog folder, never through a link (remove it)")
        if not last or folder:
            if not stat.S_ISDIR(st.st_mode):
                return here, "is not a directory (generated files go below it)"
        elif stat.S_ISDIR(st.st_mode):
            return here, "is a directory where a generated file goes"
        elif not stat.S_ISREG(st.st_mode):
            return here, "is not a regular file (a FIFO, device or socket) where a generated file goes"
    return None


def check_tree(root: Path, path: Path, folder: bool = False) -> None:
    """:func:`tree_problem` as a located error."""
    problem = tree_problem(root, path, folder)
    if problem is not None:
        raise SpecError(problem[1], str(problem[0]))


def output_problem(path: Path, follow_links: bool = True, option: str = "-o"):
    """Why ``-o path`` cannot be written (None if it can): only a regular file, or a new path whose parent is a
    directory, is ever replaced; FIFOs, devices, sockets and directories are refused before any work.
    ``follow_links=False`` judges a symbolic link at ``path`` itself (it is refused); ``option`` is the command line's
    name for the path, as the messages say it (``--write-family``)."""
    try:
        # following symbolic links: the file that would change; else the link itself
        st = os.stat(path) if follow_links else os.lstat(path)
    except NotADirectoryError:
        return "cannot create it: a parent in the path is not a directory"
    except FileNotFoundError:
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if parent.exists() and not parent.is_dir():
            return f"cannot create it: '{quote(parent)}' is not a directory"
        return None
    except (OSError, ValueError) as exc:
        return f"cannot be written ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    if stat.S_ISDIR(st.st_mode):
        return f"is a directory ({option} takes a file path)"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; only a regular file is replaced here"
    if not stat.S_ISREG(st.st_mode):
        return f"is not a regular file (a device, FIFO or socket); {option} writes regular files only"
    if not st.st_mode & stat.S_IWUSR:
        return _READ_ONLY
    return None


_READ_ONLY = "is read-only; make it writable or write to another file"


def _make_parents(folder: Path) -> None:
    """Create ``folder`` and its missing parents, outermost first, in a loop: ``Path.mkdir(parents=True)`` (and
    ``os.makedirs``) recurse once per missing level, so ``-o d/d/.../x.py`` 2000 levels deep ended in a
    RecursionError reported as 'the input is too large' (an OSError such as a name too long is raised as one)."""
    missing = []
    while not os.path.isdir(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for f in reversed(missing):
        try:
            os.mkdir(f)
        except FileExistsError:
            if not os.path.isdir(f):
                raise


def write_atomic(path: Path, text: str, follow_links: bool = True):
    """Write via a temporary file and rename, so a failure never leaves a partial file; only regular files (or
    new paths) are replaced, and a symbolic link is followed to the file it names (``follow_links=False``: a link
    at ``path`` is refused; the rename never writes through one)."""
    path = Path(path)
    problem = output_problem(path, follow_links)
    if problem is not None:
        raise SpecError(problem, str(path))
    target = Path(os.path.realpath(path)) if follow_links else Path(os.path.realpath(path.parent)) / path.name
    try:
        _make_parents(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot write ({getattr(exc, 'strerror', None) or type(exc).__name__})", str(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        try:                                            # an existing file keeps its permissions (a private 0600
            mode = stat.S_IMODE(os.lstat(target).st_mode)   # file stayed private, a read-only one is refused)
        except OSError:
            umask = os.umask(0)                        # a new file: mkstemp creates 0600; the usual 0666 & ~umask
            os.umask(umask)
            mode = 0o666 & ~umask
        else:
            if not mode & stat.S_IWUSR:
                raise SpecError(_READ_ONLY, str(path))
        os.chmod(tmp, mode)
        problem = output_problem(target, follow_links)    # replaced by something else meanwhile?
        if problem is not None:
            raise SpecError(problem, str(path))
        os.replace(tmp, target)
    except OSError as exc:
        raise SpecError(f"cannot write ({exc.strerror or type(exc).__name__})", str(path)) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def shell_word(label: str) -> str:
    """``label`` as one shell word, quoted where it needs it (a file named ``c d;rm -rf x.yaml``): a header's
    regenerate command is a command a user copies into a shell.  A relative path that starts with ``-`` is
    written ``./-x.yaml``: as ``-x.yaml`` the command would read it as an option and refuse to run."""
    if label.startswith("-"):
        label = "./" + label
    return label if re.fullmatch(r"[A-Za-z0-9_./+-]+", label) else shlex.quote(label)


def command_label(ref) -> str:
    """The recipe or family file as a command line named it, for the header's regenerate command: a name
    (``adam``, ``gaussian_diag``) as it is, a path as given (normalized: relative to the directory the command ran
    in when relative, absolute when absolute), so that the header's command, run where the first one was,
    regenerates the module.  Quoted as one shell word where it needs it."""
    ref = str(ref)
    return shell_word(ref if ref.isidentifier() else os.path.normpath(ref))


def source_label(path) -> str:
    """A machine-independent label for a recipe path (for reproducible headers of generated code)."""
    p = Path(path).resolve()
    label = f"catalog/{p.name}" if p.parent.name == "catalog" else p.name
    # quoted as one shell word where it needs it (a file named we"ird'$(id).yaml): the header is a command a
    # user copies
    return shell_word(label)
