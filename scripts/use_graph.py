#!/usr/bin/env python3
"""The file-level `use` graph of a crate's src/ directory, and its cycles.

An edge a -> b means file a names something through a path into module file b: `use crate::x::y`,
`use super::z`, an inline `crate::x::f()` or `super::y::T`, or a child module's name
(`task::spawn` in queue/mod.rs). A path resolves to the deepest module file it names (so
`crate::queue::QueueRef` is queue/mod.rs, `crate::queue::args::QueueType` is queue/args.rs).
`mod x;` declarations alone are not edges. Code inside `#[cfg(test)] mod tests { ... }` (and
files under a `tests` module) is reported separately: a cycle only through test code is "a type
and its tests".

Usage: use_graph.py crates/engine/src
Prints the strongly connected components with more than one file, without and with test code.
"""
import os
import re
import sys


def module_files(root):
    """Maps module paths (tuples) to files."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            parts = rel[:-3].split(os.sep)
            if parts == ["lib"] or parts == ["main"]:
                path = ()
            elif parts[-1] == "mod":
                path = tuple(parts[:-1])
            else:
                path = tuple(parts)
            files[path] = rel
    return files


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'b?"(\\.|[^"\\])*"', '""', text)
    return text


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = tree.replace(" ", "").replace("\n", "")
    out = []

    def go(prefix, t):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(t[start:i])
                start = i + 1
        items.append(t[start:])
        for item in items:
            if not item:
                continue
            if "{" in item:
                head, rest = item.split("{", 1)
                go(prefix + head, rest[: rest.rfind("}")])
            else:
                out.append(prefix + item.split("as")[0] if "::as" not in item else prefix + item)
    go("", tree)
    return [re.sub(r"::as.*$", "", p) for p in out]


def resolve(segments, here, files):
    """The deepest module file `segments` (from module `here`) names."""
    if not segments:
        return None
    if segments[0] == "crate":
        base, rest = (), segments[1:]
    elif segments[0] in ("super", "self"):
        base = here
        rest = segments
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    else:
        # A child module of the current one named directly (`task::spawn`).
        if here + (segments[0],) in files:
            base, rest = here, segments
        else:
            return None
    best = base if base in files else None
    path = base
    for seg in rest:
        path = path + (seg,)
        if path in files:
            best = path
        else:
            break
    return best


def edges(root):
    files = module_files(root)
    normal, test = set(), set()
    for module, rel in files.items():
        text = strip(open(os.path.join(root, rel)).read())
        is_test_file = "tests" in module
        # Inline test modules: the module path inside them is module + ('tests',).
        spans = []
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*\{", text):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            spans.append((m.start(), i, m.group(3)))
        refs = []
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            for p in expand_use(m.group(1)):
                refs.append((m.start(), p.split("::")))
        for m in re.finditer(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
            if text[max(0, m.start() - 4):m.start()].strip().endswith("use"):
                continue
            refs.append((m.start(), m.group(1).split("::")))
        for pos, segments in refs:
            in_test = [s for s in spans if s[0] <= pos < s[1]]
            here = module + ((in_test[0][2],) if in_test else ())
            target = resolve(segments, here, files)
            if target is None or target == module or target == here:
                continue
            # A test module's own file is its parent's file.
            edge = (rel, files[target])
            (test if (in_test or is_test_file) else normal).add(edge)
    return files, normal, test


def sccs(nodes, edge_set):
    graph = {n: sorted({b for a, b in edge_set if a == n}) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in nodes:
        if n not in index:
            visit(n)
    return sorted(out, key=len, reverse=True)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates/engine/src"
    files, normal, test = edges(root)
    nodes = sorted(files.values())
    print(f"{len(nodes)} files, {len(normal)} edges outside tests, {len(test)} more in tests")
    for label, edge_set in (("without test code", normal), ("with test code", normal | test)):
        comps = sccs(nodes, edge_set)
        print(f"cycles {label}: {len(comps)}")
        for comp in comps:
            print(f"  {len(comp)} files: {' '.join(comp)}")
    if "--edges" in sys.argv:
        for a, b in sorted(normal):
            print(f"{a} -> {b}")


if __name__ == "__main__":
    main()
