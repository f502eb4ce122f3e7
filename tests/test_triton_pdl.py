"""Programmatic dependent launch (kernels/triton_pdl.py) is only safe when a kernel launched with
it waits for its predecessor before touching memory. This reads the package's source: every
Triton kernel (a ``triton.jit`` function no other one calls) must open with ``pdl_start()``, and
every launch (``kernel[grid](...)``) must pass ``**pdl_launch()``, so the two cannot drift apart.
Gluon kernels (``gluon.jit``: ``pdl_start`` is a Triton function they cannot call) are launched
without PDL instead -- plain stream order before them, and a PDL successor's wait covers their
whole grid -- and the scan checks that none of their launches asks for it."""

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


def test_gluon_kernels_are_launched_without_pdl():
    kernels, launches = kernels_and_launches(_package_trees(), gluon=True)
    assert "moe_bf16_kernel" in kernels and launches  # the scan sees them
    assert [site for site, ok in launches.items() if ok] == []


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
