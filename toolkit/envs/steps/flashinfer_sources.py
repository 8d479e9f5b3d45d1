"""FlashInfer kernel sources and nvcc flags, taken from a FlashInfer source tree.

FlashInfer compiles its CUDA kernels just in time: a generator in the Python package renders one
`.cu` file per kernel instantiation from a jinja template and ninja runs nvcc over it. This module
reproduces the two pieces a build needs without importing FlashInfer (which needs torch and a GPU):

- `render_sm120_fp4_tile_source` renders the SM120 NVFP4 GEMM instantiation for one CTA tile from
  the tree's own template (`csrc/fp4_gemm_cutlass_sm120.jinja`), after checking that the tree's own
  generator (`gen_gemm_sm120_module_cutlass_fp4` in `flashinfer/jit/gemm/core.py`) lists that tile;
- `nvcc_flags_for_flashinfer` gives the nvcc flags the JIT uses (language standard, defines, arch,
  include directories resolved inside the tree), and `sm120_fp4_nvcc_command` a full command line
  for one instantiation, ready to be prefixed with `ccache`.

Tree layout: a FlashInfer git checkout and the flashinfer-python sdist have the same layout: the
installable project is the tree root (package_dir ""), with `flashinfer/`, `csrc/`, `include/`
and `3rdparty/{cutlass,cccl,spdlog}` (git submodules in the repository, vendored in the sdist).
An installed package keeps the same directories under `flashinfer/data/` (`data/csrc`,
`data/include`, `data/cutlass`, `data/cccl`, `data/spdlog`); both layouts are accepted here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

from toolkit.errors import BadInput, PatchbenchError

FP4_SM120_TEMPLATE = "fp4_gemm_cutlass_sm120.jinja"
FP4_SM120_GENERATOR = "flashinfer/jit/gemm/core.py"
FP4_SM120_FUNCTION = "gen_gemm_sm120_module_cutlass_fp4"
FP4_SM120_DEFAULT_DTYPE = "__nv_bfloat16"

# Flags FlashInfer's JIT passes to every CUDA source in a non-debug build (FlashInfer 0.7.2:
# jit/core.py gen_jit_spec, jit/cpp_ext.py build_common_cflags/build_cuda_cflags,
# compilation_context.py COMMON_NVCC_FLAGS). Flags that do not change the object are left out:
# --threads=N, -MF dependency output, -ccbin (set it through the environment or the caller).
_JIT_STD = "-std=c++17"
_JIT_CUDA_FLAGS = (
    "--compiler-options=-fPIC",
    "--expt-relaxed-constexpr",
    "-static-global-template-stub=false",  # added by the JIT for CUDA >= 12.8
    "-use_fast_math",
    "-Xfatbin=-compress-all",
    "--compress-mode=size",
    "-O3",
)
_JIT_DEFINES = (
    "-DPy_LIMITED_API=0x03090000",
    "-D_GLIBCXX_USE_CXX11_ABI=1",  # the JIT copies torch's ABI; torch wheels use the CXX11 ABI
    "-DFLASHINFER_ENABLE_F16",
    "-DFLASHINFER_ENABLE_BF16",
    "-DFLASHINFER_ENABLE_FP8_E4M3",
    "-DFLASHINFER_ENABLE_FP8_E5M2",
    "-DNDEBUG",
    "-DFLASHINFER_ENABLE_FP8_E8M0",
    "-DFLASHINFER_ENABLE_FP4_E2M1",
)

_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d+)\.?(\d)([af]?)$")


class _Layout:
    """Where the JIT's directories live in a tree: the sdist/git layout or an installed package."""

    def __init__(self, tree: Path):
        tree = Path(tree)
        if (tree / "csrc").is_dir() and (tree / "include").is_dir():
            self.csrc = tree / "csrc"
            self.include = tree / "include"
            third = tree / "3rdparty"
            self.cutlass, self.cccl, self.spdlog = third / "cutlass", third / "cccl", third / "spdlog"
            self.package = tree / "flashinfer"
        elif (tree / "flashinfer" / "data" / "csrc").is_dir():
            data = tree / "flashinfer" / "data"
            self.csrc, self.include = data / "csrc", data / "include"
            self.cutlass, self.cccl, self.spdlog = data / "cutlass", data / "cccl", data / "spdlog"
            self.package = tree / "flashinfer"
        else:
            raise BadInput(f"{tree} is not a FlashInfer source tree (no csrc/ and include/, "
                           "no flashinfer/data/csrc)")
        if not (self.cutlass / "include" / "cutlass").is_dir():
            raise BadInput(f"{tree} has no CUTLASS headers at {self.cutlass}/include "
                           "(a git checkout needs `git submodule update --init 3rdparty/cutlass`)")

    def include_flags(self) -> list[str]:
        """-I for the vendored CCCL (it must win over the CUDA toolkit's copy), -isystem for the rest."""
        cccl = [self.cccl / "cub", self.cccl / "libcudacxx" / "include", self.cccl / "thrust"]
        flags: list[str] = []
        for d in cccl:
            if d.is_dir():
                flags.append(f"-I{d.resolve()}")
        system = [
            self.include,
            self.csrc,
            self.cutlass / "include",
            self.cutlass / "tools" / "util" / "include",
            self.spdlog / "include",
        ]
        for d in system:
            if d.is_dir():
                flags += ["-isystem", str(d.resolve())]
        return flags


def normalise_arch(arch: str) -> tuple[str, str]:
    """'12.0a' / '120a' / 'sm_120a' -> ('compute_120a', 'sm_120a'). A bare '12.0' is rejected:
    say 'a' (arch-specific) or 'f' (family), since the two build different kernels."""
    m = _ARCH_RE.match(arch.strip())
    if not m:
        raise BadInput(f"unrecognised CUDA arch {arch!r} (use e.g. 12.0a, 12.0f, sm_120a)")
    major, minor, suffix = m.groups()
    if not suffix and int(major) >= 9:
        raise BadInput(f"CUDA arch {arch!r} needs a suffix: {major}.{minor}a or {major}.{minor}f")
    name = f"{major}{minor}{suffix}"
    return f"compute_{name}", f"sm_{name}"


def nvcc_flags_for_flashinfer(tree: Path, arch: str, *, module_flags: Sequence[str] = ()) -> list[str]:
    """The nvcc flags FlashInfer's JIT uses for a CUDA source of `tree`, for one `arch`.

    Returns standard, JIT defines and code-generation flags, `-gencode` for `arch`, then
    `module_flags` (a JIT module's own `extra_cuda_cflags`, e.g. `sm120_fp4_module_flags(tree)`),
    then the include directories resolved inside the tree. Python, tvm-ffi and dlpack include
    directories, which the JIT also passes, are left out: kernel instantiations do not use them.
    """
    layout = _Layout(Path(tree))
    compute, sm = normalise_arch(arch)
    return [
        _JIT_STD,
        *_JIT_CUDA_FLAGS,
        *_JIT_DEFINES,
        f"-gencode=arch={compute},code={sm}",
        *module_flags,
        *layout.include_flags(),
    ]


def _generator_function(tree: Path) -> ast.FunctionDef:
    path = _Layout(Path(tree)).package / "jit" / "gemm" / "core.py"
    if not path.is_file():
        raise BadInput(f"{tree} has no {FP4_SM120_GENERATOR}")
    module = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == FP4_SM120_FUNCTION:
            return node
    raise PatchbenchError(f"{path}: no function {FP4_SM120_FUNCTION}()")


def _assigned_literal(func: ast.FunctionDef, name: str):
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                break
    raise PatchbenchError(f"{FP4_SM120_FUNCTION}(): no literal assignment to {name}")


def sm120_fp4_tiles(tree: Path) -> list[tuple[int, int, int]]:
    """The (cta_m, cta_n, cta_k) list of the tree's SM120 FP4 GEMM generator, in its order."""
    return [tuple(t) for t in _assigned_literal(_generator_function(tree), "cta_m_n_k_list")]


def sm120_fp4_dtypes(tree: Path) -> list[str]:
    """The output types the tree's generator instantiates every tile for."""
    return list(_assigned_literal(_generator_function(tree), "dtype_list"))


def sm120_fp4_module_flags(tree: Path) -> list[str]:
    """The `extra_cuda_cflags` literals the tree's generator adds for its module (its defines)."""
    for node in ast.walk(_generator_function(tree)):
        if isinstance(node, ast.keyword) and node.arg == "extra_cuda_cflags":
            flags = [
                c.value
                for lst in ast.walk(node.value) if isinstance(lst, ast.List)
                for c in lst.elts if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            if flags:
                return flags
    raise PatchbenchError(f"{FP4_SM120_FUNCTION}(): no literal extra_cuda_cflags")


def _render(template: str, values: dict[str, object]) -> str:
    """jinja2 when installed; otherwise the `{{ name }}` subset, refusing anything more."""
    try:
        import jinja2
    except ImportError:
        jinja2 = None
    if jinja2 is not None:
        return jinja2.Template(template).render(**values)
    if "{%" in template or "{#" in template:
        raise PatchbenchError("template uses jinja statements/comments: install jinja2 to render it")

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            raise PatchbenchError(f"template variable {name!r} has no value")
        return str(values[name])

    text = re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", sub, template)
    if "{{" in text:
        raise PatchbenchError("template has expressions beyond {{ name }}: install jinja2 to render it")
    # jinja2's default (keep_trailing_newline=False) drops one trailing newline: match it so the
    # file is byte-identical to the one FlashInfer's JIT writes.
    return text[:-1] if text.endswith("\n") else text


def sm120_fp4_tile_filename(cta_m: int, cta_n: int, cta_k: int,
                            dtype: str = FP4_SM120_DEFAULT_DTYPE) -> str:
    """The file name FlashInfer's generator gives the instantiation."""
    return f"fp4_gemm_cutlass_{dtype}_{cta_m}_{cta_n}_{cta_k}.cu"


def render_sm120_fp4_tile_source(tree: Path, cta_m: int, cta_n: int, cta_k: int, out_dir: Path, *,
                                 dtype: str = FP4_SM120_DEFAULT_DTYPE,
                                 require_listed: bool = True) -> Path:
    """Write the SM120 NVFP4 GEMM instantiation of one CTA tile, as FlashInfer's JIT would.

    The text comes from the tree's `csrc/fp4_gemm_cutlass_sm120.jinja` rendered with the same
    variables as `gen_gemm_sm120_module_cutlass_fp4` (type, cta_m, cta_n, cta_k). With
    `require_listed` the tile and dtype must be in that generator's lists, so an unpatched tree
    cannot silently render a tile it would never build. The file is rewritten only when its
    content changes (keeps mtimes stable for ninja/ccache). Returns its path.
    """
    tree = Path(tree)
    layout = _Layout(tree)
    tile = (int(cta_m), int(cta_n), int(cta_k))
    if require_listed:
        tiles = sm120_fp4_tiles(tree)
        if tile not in tiles:
            raise BadInput(f"tile {tile[0]}x{tile[1]}x{tile[2]} is not in {FP4_SM120_FUNCTION}() of "
                           f"{tree} (its tiles: {', '.join('x'.join(map(str, t)) for t in tiles)})")
        dtypes = sm120_fp4_dtypes(tree)
        if dtype not in dtypes:
            raise BadInput(f"dtype {dtype!r} is not in {FP4_SM120_FUNCTION}() (its: {dtypes})")
    template = layout.csrc / FP4_SM120_TEMPLATE
    if not template.is_file():
        raise BadInput(f"{tree} has no {template.relative_to(tree)}")
    text = _render(template.read_text(), {"type": dtype, "cta_m": tile[0], "cta_n": tile[1],
                                          "cta_k": tile[2]})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / sm120_fp4_tile_filename(*tile, dtype=dtype)
    if not dest.is_file() or dest.read_text() != text:
        dest.write_text(text)
    return dest


def sm120_fp4_nvcc_command(tree: Path, source: Path, output: Path, *, arch: str = "12.0a",
                           nvcc: str = "nvcc", extra: Sequence[str] = ()) -> list[str]:
    """argv compiling one rendered instantiation to an object, with the JIT's flags for its module.

    `extra` goes last (like FLASHINFER_EXTRA_CUDAFLAGS). Prefix with `ccache` to cache.
    """
    flags = nvcc_flags_for_flashinfer(tree, arch, module_flags=sm120_fp4_module_flags(tree))
    return [nvcc, *flags, *extra, "-c", str(source), "-o", str(output)]
