#!/usr/bin/env python3
"""The file-level `use` graph of a crate's src/ directory, and its cycles.

An edge a -> b means file a names something through a path into module file b: `use crate::x::y`,
`use super::z`, an inline `crate::x::f()` or `super::y::T`, or a child module's name
(`task::spawn` in queue/mod.rs). A path resolves to the deepest module file it names (so
`crate::queue::QueueRef` is queue/mod.rs, `crate::queue::args::QueueType` is queue/args.rs).
An item a module file only re-exports counts as the file that defines it (`use super::Placed`
in segment_log/read.rs names segment_log/writer.rs, not the mod.rs that re-exports it).
`mod x;` declarations alone are not edges. Code inside `#[cfg(test)] mod tests { ... }` (and
files under a `tests` module) is reported separately: a cycle only through test code is "a type
and its tests".

Usage: use_graph.py crates/engine/src [--edges] [--fail-on-cycles]
Prints the strongly connected components with more than one file, without and with test code;
with --fail-on-cycles, exits 1 when there is one outside test code (scripts/test.sh uses it).
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
    """Drops comments, and the contents of string and char literals (a path written in one is
    no reference). One left-to-right scan, so that a `//` inside a string, a quote inside a
    char literal, and a string continued over lines with a `\\` stay what they are."""
    token = re.compile(
        r'//[^\n]*'                        # line comment
        r'|/\*.*?\*/'                      # block comment
        r'|b?r(#*)".*?"\1'                  # raw string, any number of #
        r'|b?"(?:\\.|[^"\\])*"'             # string; \\. also takes a line continuation
        r"|b?'(?:\\.|[^'\\\n])'",           # char literal (not a lifetime: it closes)
        re.S,
    )

    def keep(m):
        t = m.group(0)
        if t.startswith("//") or t.startswith("/*"):
            return " "
        return "''" if t.endswith("'") else '""'

    return token.sub(keep, text)


def expand_use(tree):
    """`a::{b, c::{d as e, f}}` -> ['a::b', 'a::c::d', 'a::c::f']."""
    # A rename names the same item: drop `as name` before the spaces that set it apart go.
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
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
                out.append(prefix + item)
    go("", tree)
    return out


def resolve(segments, here, files, reexports=None, depth=0):
    """The deepest module file `segments` (from module `here`) names. An item a module file
    only re-exports (`pub use child::Item;` in mod.rs) resolves to the file that defines it."""
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
    left = list(rest)
    for seg in rest:
        path = path + (seg,)
        if path in files:
            best = path
            left = left[1:]
        else:
            break
    if reexports and best is not None and left and depth < 8:
        target = reexports.get(best, {}).get(left[0])
        if target is not None:
            found = resolve(target + left[1:], best, files, reexports, depth + 1)
            if found is not None:
                return found
            if target[0] not in ("crate", "super", "self") and best + (target[0],) not in files:
                # Re-exported from another crate (`pub use other as name;`): not this crate's.
                return None
    return best


def reexports_of(files, texts):
    """For each module file, the items it brings in with `use`: name -> the path it names. A
    child reaches a private import as well as a `pub use` through `super::`."""
    out = {}
    for module, rel in files.items():
        found = {}
        for m in re.finditer(r"\buse\s+([^;]+);", texts[rel]):
            for p in expand_use(m.group(1)):
                segments = p.split("::")
                if segments[-1] not in ("*", "self"):
                    found[segments[-1]] = segments
        # A renamed import is found under its new name (`pub use other as name;`).
        for m in re.finditer(r"\buse\s+([\w:]+)\s+as\s+(\w+)\s*;", texts[rel]):
            found[m.group(2)] = m.group(1).split("::")
        out[module] = found
    return out


def edges(root):
    files = module_files(root)
    texts = {}
    for rel in files.values():
        with open(os.path.join(root, rel)) as f:
            texts[rel] = strip(f.read())
    reexports = reexports_of(files, texts)
    normal, test = set(), set()
    for module, rel in files.items():
        text = texts[rel]
        is_test_file = "tests" in module
        # Inline test modules: the module path inside them is module + ('tests',).
        spans = []
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*\{", text):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            spans.append((m.start(), i, m.group(3)))
        # `pub(in crate::queue)` names where an item is visible, not what it uses.
        text = re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", lambda m: " " * len(m.group(0)), text)
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
            target = resolve(segments, here, files, reexports)
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
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else "crates/engine/src"
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
    if "--fail-on-cycles" in sys.argv and sccs(nodes, normal):
        sys.exit(1)


if __name__ == "__main__":
    main()
