"""Static checks of the Julia package julia/OpenMMGraph (Julia itself is not
needed): every .jl file parses with the tree-sitter Julia grammar, and every C
symbol the Julia code calls is declared in the C header, so the two cannot
drift apart.  Does not import openmmgraph."""

import re
from pathlib import Path

import pytest

tree_sitter = pytest.importorskip("tree_sitter")
tree_sitter_julia = pytest.importorskip("tree_sitter_julia")

ROOT = Path(__file__).resolve().parents[2]
JULIA_DIR = ROOT / "julia"
HEADER = ROOT / "wrappers" / "include" / "OpenMMGraphDLPack.h"

# ccall((:name, lib), ...), ccall(_fn(:name), ...) (the package's dlsym of the
# library) and @ccall lib.name(...) forms.
CCALL_RE = re.compile(r"\bccall\s*\(\s*(?:\(|_fn\()\s*:(\w+)\s*[,)]")
MACRO_CCALL_RE = re.compile(r"@ccall\s+[\w.()\"$]*?\.(\w+)\s*\(")
HEADER_FUNC_RE = re.compile(r"^\s*OMMGRAPH_C_EXPORT\s+[\w\s\*]+?\b(\w+)\s*\(", re.MULTILINE)


def _parser():
    language = tree_sitter.Language(tree_sitter_julia.language())
    try:
        return tree_sitter.Parser(language)
    except TypeError:  # tree-sitter < 0.22
        parser = tree_sitter.Parser()
        parser.set_language(language)
        return parser


def syntax_errors(path):
    """'file:line:column: ERROR|MISSING ...' for every error node of the parse tree."""
    tree = _parser().parse(Path(path).read_bytes())
    problems = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            line, column = node.start_point
            kind = f"MISSING {node.type}" if node.is_missing else "ERROR"
            problems.append(f"{path}:{line + 1}:{column + 1}: {kind}")
        if node.has_error:  # only subtrees with errors can hold more
            stack.extend(node.children)
    return sorted(problems)


def julia_files():
    """The Julia package and the Julia examples."""
    return sorted(JULIA_DIR.rglob("*.jl")) + sorted((ROOT / "examples").glob("*.jl"))


def ccall_symbols(text):
    return set(CCALL_RE.findall(text)) | set(MACRO_CCALL_RE.findall(text))


def header_functions():
    return set(HEADER_FUNC_RE.findall(HEADER.read_text()))


def test_there_are_julia_sources():
    names = {p.relative_to(ROOT).as_posix() for p in julia_files()}
    assert "julia/OpenMMGraph/src/OpenMMGraph.jl" in names
    assert "julia/OpenMMGraph/test/runtests.jl" in names
    assert "examples/julia_forces.jl" in names


@pytest.mark.parametrize("path", julia_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_julia_file_parses(path):
    problems = syntax_errors(path)
    assert not problems, "syntax errors:\n" + "\n".join(problems)


def test_parser_reports_broken_julia(tmp_path):
    broken = tmp_path / "broken.jl"
    broken.write_text("function f(x)\n    y = (x + 1\n    return y\nend\n\nfunction g(\n")
    problems = syntax_errors(broken)
    assert problems
    assert all(p.startswith(f"{broken}:") for p in problems)
    assert re.match(rf"{re.escape(str(broken))}:\d+:\d+: (ERROR|MISSING)", problems[0])
    good = tmp_path / "good.jl"
    good.write_text("function f(x)\n    y = (x + 1)\n    return y\nend\n")
    assert syntax_errors(good) == []


def test_header_functions_are_found():
    funcs = header_functions()
    assert {"ommgraph_view_versioned", "ommgraph_view_legacy", "ommgraph_view_device",
            "ommgraph_synchronize_stream", "ommgraph_last_error", "ommgraph_live_views"} <= funcs


OPENMM_FUNC_RE = re.compile(r"^\s*extern\s+OPENMM_EXPORT\s+[\w\s\*]+?\b(OpenMM_\w+)\s*\(", re.MULTILINE)


def openmm_c_functions():
    """The functions of OpenMM's C API (OpenMMCWrapper.h of the installed openmm wheel), which the package
    calls through the same lookup (libOpenMM is a dependency of the library)."""
    import openmm

    header = Path(openmm.__file__).resolve().parents[1] / "OpenMM.libs" / "include" / "OpenMMCWrapper.h"
    if not header.is_file():
        pytest.skip(f"no OpenMM C API header at {header}")
    return set(OPENMM_FUNC_RE.findall(header.read_text()))


def test_ccall_symbols_exist_in_header():
    declared = header_functions()
    used = {}
    for path in julia_files():
        for name in ccall_symbols(path.read_text()):
            used.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    assert used, "no ccall found in the Julia sources"
    openmm_functions = set()
    if any(name.startswith("OpenMM_") for name in used):
        openmm_functions = openmm_c_functions()
        assert "OpenMM_Platform_loadPluginsFromDirectory" in openmm_functions  # the header's declarations are read
    missing = {name: files for name, files in used.items() if name not in declared and name not in openmm_functions}
    assert not missing, f"ccall symbols declared neither in {HEADER.name} nor in OpenMM's OpenMMCWrapper.h: {missing}"


def test_julia_wraps_the_whole_c_api():
    used = set()
    for path in julia_files():
        used |= ccall_symbols(path.read_text())
    # The Python helpers are for Python bindings only.
    wanted = header_functions() - {"ommgraph_python_release", "ommgraph_capsule_destructor"}
    assert wanted <= used, f"C functions without a Julia wrapper: {sorted(wanted - used)}"


def test_symbol_check_catches_drift():
    text = "x = ccall((:ommgraph_view_legacy, libpath()), Cint, ())\n" \
           "y = ccall((:ommgraph_no_such_function, libpath()), Cint, ())\n" \
           "z = @ccall libfoo.ommgraph_macro_form(1::Cint)::Cint\n" \
           "w = ccall(_fn(:ommgraph_dlsym_form), Cint, ())\n"
    used = ccall_symbols(text)
    assert used == {"ommgraph_view_legacy", "ommgraph_no_such_function", "ommgraph_macro_form", "ommgraph_dlsym_form"}
    assert used - header_functions() == {"ommgraph_no_such_function", "ommgraph_macro_form", "ommgraph_dlsym_form"}
