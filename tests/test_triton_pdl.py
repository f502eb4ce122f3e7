"""Programmatic dependent launch (kernels/triton_pdl.py) is only safe when a kernel launched with
it waits for its predecessor before touching memory. This reads the package's source: every
Triton kernel (a ``triton.jit`` function no other one calls) must open with ``pdl_start()``, and
every launch (``kernel[grid](...)``) must pass ``**pdl_launch()``, so the two cannot drift apart.
Gluon kernels (``gluon.jit``: ``pdl_start`` is a Triton function they cannot call) ask for PDL only
through ``gluon_gemv.pdl_options``, which also sets their ``PDL`` constexpr: such a kernel opens with
``_let_next_launch(PDL and ...)`` and hands ``PDL`` to every partition, each of which calls
``_wait_for_previous(PDL)``; the others launch without it (plain stream order before them, and a PDL
successor's wait covers their whole grid)."""

from __future__ import annotations

import ast
import pathlib

import deepinfer_adapters

PACKAGE = pathlib.Path(deepinfer_adapters.__file__).parent


def _jit_functions(tree: ast.AST, gluon: bool = False) -> list[ast.FunctionDef]:
    """``triton.jit`` functions, or with ``gluon`` the ``gluon.jit`` ones."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            and any("jit" in ast.unparse(d) and ("gluon" in ast.unparse(d)) == gluon for d in n.decorator_list)]


def _first_statement(fn: ast.FunctionDef) -> ast.stmt:
    body = fn.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    return body[1] if docstring and len(body) > 1 else body[0]


def _referenced_names(fn: ast.FunctionDef) -> set[str]:
    """Names a jit function's body uses: the helpers it calls or passes (a scan's combine function)."""
    return {n.attr if isinstance(n, ast.Attribute) else n.id for stmt in fn.body for n in ast.walk(stmt)
            if isinstance(n, (ast.Name, ast.Attribute))}


def _package_trees() -> dict[str, ast.AST]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def kernels_and_launches(trees: dict[str, ast.AST], gluon: bool = False):
    """(kernels: name -> opens with pdl_start, launches: 'file:line' -> passes pdl_launch); ``gluon``: of the
    Gluon kernels."""
    jit = {fn.name: fn for tree in trees.values() for fn in _jit_functions(tree, gluon)}
    helpers = set().union(*(_referenced_names(fn) for fn in jit.values())) & jit.keys()
    kernels = {}
    for name, fn in jit.items():
        if name in helpers:
            continue
        first = _first_statement(fn)
        kernels[name] = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                         and getattr(first.value.func, "id", "") == "pdl_start")
    launches = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and getattr(node.func.value, "id", "") in jit.keys() | (set() if gluon else _launch_aliases(tree)):
                launches[f"{path}:{node.lineno}"] = any(
                    k.arg is None and isinstance(k.value, ast.Call) and getattr(k.value.func, "id", "") == "pdl_launch"
                    for k in node.keywords)
    return kernels, launches


def _launch_aliases(tree: ast.AST) -> set[str]:
    """Local names a module binds its kernels to (``triton, kernel, ... = _kernels()``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and "_kernel" in ast.unparse(node.value):
            for target in node.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        names.add(t.id)
    return names - {"triton", "_", "jit"}


def test_every_kernel_waits_for_its_predecessor_and_every_launch_asks_for_pdl():
    kernels, launches = kernels_and_launches(_package_trees())
    # the package's kernels (a floor, so that a broken scan cannot pass on an empty list)
    assert {"fp8_gemm_kernel", "fp8_gemm_rows_kernel", "fp4_gemm_rows_kernel", "rms_norm", "route_kernel",
            "sort_pairs_kernel", "sparse_attn_bf16", "split_linear_kernel"} <= kernels.keys()
    assert len(launches) >= 25
    assert [k for k, ok in kernels.items() if not ok] == []
    assert [site for site, ok in launches.items() if not ok] == []


def _calls(fn: ast.FunctionDef, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name]


def _gluon_launches(trees: dict[str, ast.AST], jit: dict) -> dict[str, tuple[str, set[str]]]:
    """'file:line' -> (the Gluon kernel launched, the names of the functions its ``**`` options come from)."""
    launches = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and getattr(node.func.value, "id", "") in jit:
                options = {getattr(k.value.func, "id", "") for k in node.keywords
                           if k.arg is None and isinstance(k.value, ast.Call)}
                launches[f"{path}:{node.lineno}"] = (node.func.value.id, options)
    return launches


def _partitions(kernel: ast.FunctionDef, jit: dict) -> list[tuple[ast.FunctionDef, ast.Tuple]]:
    """(function, argument tuple) of each partition the kernel's ``warp_specialize`` calls list."""
    return [(jit[elt.elts[0].id], elt.elts[1]) for call in ast.walk(kernel) if isinstance(call, ast.Call)
            and getattr(call.func, "attr", "") == "warp_specialize" for elt in call.args[0].elts]


def test_gluon_kernels_ask_for_pdl_only_with_their_waits():
    trees = _package_trees()
    jit = {fn.name: fn for tree in trees.values() for fn in _jit_functions(tree, gluon=True)}
    launches = _gluon_launches(trees, jit)
    assert "moe_bf16_kernel" in jit and len(launches) >= 3  # the scan sees them
    assert [site for site, (_, options) in launches.items() if "pdl_launch" in options] == []  # Triton's option
    with_pdl = {kernel for kernel, options in launches.values() if "pdl_options" in options}
    assert with_pdl == {"fp8_gemv_kernel", "bf16_gemv_kernel", "topk_gluon_kernel"}
    for name in with_pdl:
        kernel = jit[name]
        assert "PDL" in [a.arg for a in kernel.args.args]
        assert ast.unparse(_first_statement(kernel)).startswith("_let_next_launch(PDL"), name
        parts = _partitions(kernel, jit)
        if not parts:  # one partition, the kernel itself: it waits before its first memory access
            assert [ast.unparse(c) for c in _calls(kernel, "_wait_for_previous")] == ["_wait_for_previous(PDL)"]
            body = [ast.unparse(stmt) for stmt in kernel.body]
            wait = body.index("_wait_for_previous(PDL)")
            assert not [b for b in body[:wait] if "load(" in b or "store(" in b], name
        for fn, args in parts:
            assert "PDL" in [ast.unparse(a) for a in args.elts], (name, fn.name)  # handed to the partition
            assert [ast.unparse(c) for c in _calls(fn, "_wait_for_previous")] == ["_wait_for_previous(PDL)"], fn.name


def test_the_scan_finds_a_kernel_without_the_wait_and_a_launch_without_the_option():
    source = '''
import triton
@triton.jit
def helper(x):
    return x
@triton.jit
def good_kernel(X):
    """doc"""
    pdl_start()
    helper(X)
@triton.jit
def bad_kernel(X):
    helper(X)
def run(x):
    good_kernel[(1,)](x, **pdl_launch())
    bad_kernel[(1,)](x)
'''
    kernels, launches = kernels_and_launches({"m.py": ast.parse(source)})
    assert kernels == {"good_kernel": True, "bad_kernel": False}
    assert sorted(launches.values()) == [False, True]
