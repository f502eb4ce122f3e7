"""The captured B=1 decode graph's nodes and edges, from CUDA's own dump of it (``torch.cuda.CUDAGraph``'s
``enable_debug_mode`` / ``debug_dump``: cudaGraphDebugDotPrint), for the reduced V4.1 at real widths as
``bench_real_width.py`` builds it.

Why: the B=1 timelines show a kernel that waits on other capture streams as well as on the kernel before it starting
~2-3 us after its last input ends, on another of the graph's streams, where a kernel behind one other on its own
stream launches under PDL and overlaps (session 35); and every timeline since session 25 has ~7.4 us of idle between
the embedding's gather and the first norm with no kernel or copy traced there. The dump says which nodes each node
waits for (and of what kind: kernel, memset, memcpy, event, empty), which the profiler's timeline does not.

Prints the node kinds, how many kernels wait on more than one node, and the first ``--first`` nodes in a topological
order with the nodes each waits for; writes the dump to ``--out``/graph_b1.dot for reading offline.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/probe_graph_edges.py [--first 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re

import torch

from benchmarks import bench_real_width as brw
from deepinfer_adapters.config import parse_config
from deepinfer_adapters.model_impl import native_format
from deepinfer_adapters.model_impl.numerics import Numerics
from deepinfer_adapters.standalone.cuda_graphs import DecodeGraphs

_NODE = re.compile(r'^"(graph_\d+_node_\d+)"\s*\[(.*?)\];', re.S | re.M)  # declarations start a line; edges' ->
_EDGE = re.compile(r'"(graph_\d+_node_\d+)"\s*->\s*"(graph_\d+_node_\d+)"([^;\n]*)')
_KINDS = ("KERNEL", "MEMCPY", "MEMSET", "EVENT_RECORD", "WAIT_EVENT", "EMPTY", "HOST", "MEM_ALLOC", "MEM_FREE",
          "CONDITIONAL", "GRAPH", "EXT_SEMAS")


def parse(dot: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, str]]]:
    """(node -> (kind, label text), edges (from, to, attributes)) of a cudaGraphDebugDotPrint dump."""
    nodes = {}
    for name, body in _NODE.findall(dot):
        kind = next((k for k in _KINDS if k in body), "?")
        nodes[name] = (kind, " ".join(body.replace("\\n", " ").split()))
    edges = [(a, b, attrs.strip()) for a, b, attrs in _EDGE.findall(dot)]
    return nodes, edges


def kernel_name(label: str) -> str:
    """A short name for a node's label: a Triton kernel's own name, or the longest name in a mangled one."""
    named = re.search(r"\(topoId: \d+\) \| ([A-Za-z_][A-Za-z0-9_]*)", label)  # the driver's own dump's field
    label = named.group(1) if named else label
    words = [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", label)
             if w not in _KINDS and not w.startswith(("graph_", "style", "shape", "label", "solid", "rectangle"))]
    mangled = [w for w in words if w.startswith("_Z")]
    if mangled:  # length-prefixed names: <n><n characters>
        parts, text, i = [], mangled[0], 0
        while i < len(text):
            m = re.match(r"\d+", text[i:])
            start = i + (m.end() if m else 0)
            if m and (text[start:start + 1].isalpha() or text[start:start + 1] == "_"):
                parts.append(text[start:start + int(m.group(0))])
                i = start + int(m.group(0))
            else:
                i += 1
        return max(parts, key=len) if parts else mangled[0][:60]
    return max(words, key=len)[:60] if words else label[:60]


def topological(nodes: dict, edges: list) -> list[str]:
    """The nodes in Kahn's order, ties by node number (close to the capture's issue order)."""
    preds, succs = collections.defaultdict(set), collections.defaultdict(set)
    for a, b, _ in edges:
        preds[b].add(a)
        succs[a].add(b)
    number = {n: int(n.rsplit("_", 1)[1]) for n in nodes}
    ready = sorted((n for n in nodes if not preds[n]), key=number.get)
    order, left = [], {n: len(preds[n]) for n in nodes}
    while ready:
        n = ready.pop(0)
        order.append(n)
        for s in sorted(succs[n], key=number.get):
            left[s] -= 1
            if left[s] == 0:
                ready.append(s)
        ready.sort(key=number.get)
    return order


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=40)
    ap.add_argument("--context", type=int, default=brw.CONTEXT)
    ap.add_argument("--out", default="/tmp/probe_graph_edges")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cfg = parse_config(brw.reduced_config(False))
    model, _ = brw.build_model(cfg, Numerics.reference(), "cuda", native_format.EXPERT_BLOCK)
    state = model.new_state(2, args.context + 8)
    brw.fill_state(state, cfg, torch.Generator(device="cuda").manual_seed(1001))

    class DebugGraph(torch.cuda.CUDAGraph):  # keeps the graph for the dump
        def __new__(cls, *a, **k):
            # without keep_graph torch drops the captured graph once instantiated, and debug_dump writes nothing
            # (sessions 36-37: parts s36a, s36d, s37a)
            return super().__new__(cls, keep_graph=True)

        def __init__(self, *a, **k):
            # Python calls the binding's __init__ with the caller's arguments (none), which would construct it again
            # without keep_graph (session 37, part s37a): keep_graph is said here as well
            super().__init__(keep_graph=True)
            self.enable_debug_mode()

    plain, torch.cuda.CUDAGraph = torch.cuda.CUDAGraph, DebugGraph
    try:
        graphs = DecodeGraphs(model, state, pad_slot=1, max_batch=1, max_len=args.context + 8, device="cuda")
        graphs.capture_all(args.context + 1)
    finally:
        torch.cuda.CUDAGraph = plain
    (graph, _), = graphs._graphs.values()
    path = os.path.join(args.out, "graph_b1.dot")
    graph.debug_dump(path)
    if not os.path.exists(path):
        raise SystemExit(f"debug_dump wrote no {path} (is the graph kept? see DebugGraph)")
    with open(path) as fh:
        nodes, edges = parse(fh.read())
    kinds = collections.Counter(kind for kind, _ in nodes.values())
    preds = collections.defaultdict(list)
    for a, b, attrs in edges:
        preds[b].append((a, attrs))
    several = [n for n, (kind, _) in nodes.items() if kind == "KERNEL" and len(preds[n]) > 1]
    print(f"graph: {len(nodes)} nodes {dict(kinds)}, {len(edges)} edges "
          f"({collections.Counter(attrs for _, _, attrs in edges).most_common(4)}); "
          f"{len(several)} kernels wait on more than one node")
    for n in topological(nodes, edges)[:args.first]:
        kind, label = nodes[n]
        waits = ", ".join(f"{kernel_name(nodes[a][1]) if nodes[a][0] == 'KERNEL' else nodes[a][0]}"
                          f"{' ' + attrs if attrs else ''}" for a, attrs in preds[n])
        print(f"{n:>18s} {kind:12s} {kernel_name(label) if kind == 'KERNEL' else '':40s} <- {waits or '-'}")


if __name__ == "__main__":
    main()
