"""Each Triton kernel of a generated module described once: its parameters in order, each with what a launch
passes for it, so that the kernel's signature and every launch of it are printed from the same description and
cannot fall out of step (a buffer added to a kernel is added to its launches).  A launch site may pass another
value for a named argument (``collect.launch(_seed="_seeds[id(group)]", COLLECT="True")``)."""
from __future__ import annotations

from dataclasses import dataclass

from blr_derive.codegen.inert import pystr

#: the grid of a kernel with one program per block of a chunk table
BLOCKS = "(chunks.shape[0],)"


@dataclass(frozen=True)
class KernelArg:
    params: tuple[str, ...]      # what it binds in the kernel's signature (none, one, or a starred group's several)
    value: str                   # what a launch passes
    key: str                     # the name a launch site overrides it by
    keyword: bool = False        # passed as key=value (a tl.constexpr)

    def passed(self, value: str) -> str:
        return f"{self.key}={value}" if self.keyword else value


@dataclass(frozen=True)
class Kernel:
    name: str
    args: tuple[KernelArg, ...]
    grid: str = BLOCKS

    @property
    def signature(self) -> str:
        """The parameters of ``def name(...)``."""
        return ", ".join(p for a in self.args for p in a.params)

    def launch(self, **values: str) -> str:
        """``name[grid](...)`` with every argument's value, or the one given for its key."""
        unknown = set(values) - {a.key for a in self.args}
        if unknown:
            raise KeyError(f"{self.name} has no argument {', '.join(sorted(unknown))}")
        return f"{self.name}[{self.grid}]({', '.join(a.passed(values.get(a.key, a.value)) for a in self.args)})"


def arg(param: str, value: str) -> KernelArg:
    return KernelArg((param,), value, param)


def constexpr(name: str, value: str) -> KernelArg:
    return KernelArg((f"{name}: tl.constexpr",), value, name, keyword=True)


def buffers(names, made: bool = False) -> list[KernelArg]:
    """fp32 buffers of the group, one parameter each (``made``: created on first use, ``_lay.buffer``)."""
    return [KernelArg((f"_buf_{n}",), f"_lay.buffer({pystr(n)})" if made else f"_lay.buffers[{pystr(n)}]", f"_buf_{n}")
            for n in names]


def host_values(comp) -> list[KernelArg]:
    """A compiled program's host values: the fp32 numbers (``*floats``) and the constexpr flags (``*flags``)."""
    return [KernelArg(tuple(a[0] for a in comp.float_args), "*floats", "floats"),
            KernelArg(tuple(f"{a[0]}: tl.constexpr" for a in comp.flag_args), "*flags", "flags")]


def block_kernel(name: str, middle: list[KernelArg], comp, ncols: int, before_host=(), after_host=()) -> Kernel:
    """A kernel over the chunk table and pointer table of a group: ``_chunks, _ptrs``, then ``middle``, the
    program's host values and the constexprs (``after_host`` first), the pointer-table width and the dtypes."""
    return Kernel(name, (arg("_chunks", "chunks"), arg("_ptrs", "ptrs"), *middle, *before_host, *host_values(comp),
                         *after_host, constexpr("NPTR", str(ncols + 2)), constexpr("PDT", "_TL_DTYPES[dtype]"),
                         constexpr("BLOCK", "BLOCK")))


@dataclass(frozen=True)
class ModuleKernels:
    """The kernels of one generated module (the chained ones hang on their phases: ``phase["kernel"]``)."""
    update: Kernel
    point: Kernel | None = None
    draw: Kernel | None = None
    collect: Kernel | None = None
    noise: Kernel | None = None
