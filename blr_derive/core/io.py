"""Writing output files safely (README, "Safety model"): only a regular file, or a new path, is ever replaced, and
it is replaced atomically (a temporary file in the same directory, renamed into place)."""
from __future__ import annotations

import os
import re
import shlex
import stat
import tempfile
from pathlib import Path

from blr_derive.core.errors import SpecError
from blr_derive.core.text import quote


def output_problem(path: Path):
    """Why ``-o path`` cannot be written (None if it can): only a regular file, or a new path whose parent is a
    directory, is ever replaced; FIFOs, devices, sockets and directories are refused before any work."""
    try:
        st = os.stat(path)                              # follows symbolic links: the file that would change
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
        return "is a directory (-o takes a file path)"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a device, FIFO or socket); -o writes regular files only"
    return None


def write_atomic(path: Path, text: str):
    """Write via a temporary file and rename, so a failure never leaves a partial file; only regular files (or
    new paths) are replaced, and a symbolic link is followed to the file it names."""
    path = Path(path)
    problem = output_problem(path)
    if problem is not None:
        raise SpecError(problem, str(path))
    target = Path(os.path.realpath(path))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot write ({getattr(exc, 'strerror', None) or type(exc).__name__})", str(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        try:                                            # an existing file keeps its permissions (a private 0600
            mode = stat.S_IMODE(os.stat(target).st_mode)    # file stayed private, a read-only one is refused)
        except OSError:
            umask = os.umask(0)                        # a new file: mkstemp creates 0600; the usual 0666 & ~umask
            os.umask(umask)
            mode = 0o666 & ~umask
        else:
            if not mode & stat.S_IWUSR:
                raise SpecError("is read-only; make it writable or write to another file", str(path))
        os.chmod(tmp, mode)
        problem = output_problem(target)              # replaced by something else meanwhile?
        if problem is not None:
            raise SpecError(problem, str(path))
        os.replace(tmp, target)
    except OSError as exc:
        raise SpecError(f"cannot write ({exc.strerror or type(exc).__name__})", str(path)) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def source_label(path) -> str:
    """A machine-independent label for a recipe path (for reproducible headers of generated code)."""
    p = Path(path).resolve()
    label = f"catalog/{p.name}" if p.parent.name == "catalog" else p.name
    # quoted as one shell word where it needs it (a file named we"ird'$(id).yaml): the header is a command a
    # user copies
    return label if re.fullmatch(r"[A-Za-z0-9_./+-]+", label) else shlex.quote(label)
