#!/usr/bin/env python3
"""Tests of scripts/use_graph.py on small crates written to a temporary directory.

Each case is one way the graph once misreported: a `use` path with the letters "as" in it, a
string continued over lines with `\\`, an item reached through a re-export, a `pub(in path)`
visibility taken for a use, an item another crate defines, and the exit code scripts/test.sh
relies on.
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import use_graph  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "use_graph.py")


def crate(files):
    """Writes `files` (path -> text) under a fresh src/ and returns its path."""
    root = tempfile.mkdtemp(prefix="use_graph_")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return root


def cycles(root):
    files, normal, _ = use_graph.edges(root)
    return use_graph.sccs(sorted(files.values()), normal)


class UseGraph(unittest.TestCase):
    def test_paths_with_the_letters_as_are_not_split(self):
        # `task::Spawn` and `classes::Kind` once became `t` and `cl`: the edges were lost.
        root = crate({
            "lib.rs": "mod task;\nmod classes;\n",
            "task.rs": "use crate::classes::Kind;\npub struct Spawn(Kind);\n",
            "classes.rs": "use crate::task::Spawn as Started;\npub struct Kind;\n"
                          "fn f(_: Started) {}\n",
        })
        self.assertEqual(cycles(root), [["classes.rs", "task.rs"]])

    def test_expand_use_drops_renames(self):
        self.assertEqual(
            use_graph.expand_use("a::{b as c, d::{e, f as g}}, h"),
            ["a::b", "a::d::e", "a::d::f", "h"],
        )
        self.assertEqual(use_graph.expand_use("crate::task::spawn"), ["crate::task::spawn"])

    def test_a_continued_string_does_not_hide_the_code_after_it(self):
        # The old per-line regex lost track at the `\` and read the `use` below as string.
        root = crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": 'const TEXT: &str = "one \\\n    two \\"quoted\\" // not a comment";\n'
                    'const MORE: &str = "three \\\n    four";\n'
                    'use crate::b::B;\npub struct A(B);\nconst LAST: &str = "five";\n',
            "b.rs": "use crate::a::A;\npub struct B;\nfn f(_: A) {}\n",
        })
        self.assertEqual(cycles(root), [["a.rs", "b.rs"]])

    def test_paths_inside_literals_and_comments_are_not_edges(self):
        root = crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": 'const S: &str = "crate::b::B";\nconst R: &str = r#"crate::b::B"#;\n'
                    "// crate::b::B\n/* crate::b::B */\nconst C: char = '\"';\n",
            "b.rs": "use crate::a::S;\n",
        })
        _, normal, _ = use_graph.edges(root)
        self.assertEqual(normal, {("b.rs", "a.rs")})

    def test_a_reexported_item_counts_as_its_defining_file(self):
        # read.rs names `super::Placed`, which mod.rs only re-exports from writer.rs, and
        # `super::Shared`, which mod.rs imports privately; mod.rs itself uses read.rs.
        root = crate({
            "lib.rs": "mod log;\n",
            "log/mod.rs": "mod read;\nmod writer;\npub use writer::Placed;\nuse self::writer::Shared;\n"
                          "fn g(_: read::Reader) {}\n",
            "log/writer.rs": "pub struct Placed;\npub(super) struct Shared;\n",
            "log/read.rs": "use super::{Placed, Shared};\npub struct Reader(Placed, Shared);\n",
        })
        _, normal, _ = use_graph.edges(root)
        self.assertIn(("log/read.rs", "log/writer.rs"), normal)
        self.assertNotIn(("log/read.rs", "log/mod.rs"), normal)
        self.assertEqual(cycles(root), [])

    def test_an_item_reexported_from_another_crate_is_not_an_edge(self):
        # lib.rs re-exports another crate whole and some of its modules; m.rs names items
        # through both, which are not lib.rs's own; lib.rs itself uses m.rs.
        root = crate({
            "lib.rs": "mod m;\npub use other as q;\npub use other::{error, session};\nfn f(_: m::M) {}\n",
            "m.rs": "use crate::error::E;\npub struct M(E, crate::q::Handle, crate::session::S);\n",
        })
        _, normal, _ = use_graph.edges(root)
        self.assertNotIn(("m.rs", "lib.rs"), normal)
        self.assertEqual(cycles(root), [])

    def test_a_visibility_path_is_not_an_edge(self):
        # `pub(in crate::q)` restricts who may see the item; it uses nothing of q's mod.rs.
        root = crate({
            "lib.rs": "mod q;\n",
            "q/mod.rs": "mod disk;\nmod browse;\nfn f(_: browse::B) {}\n",
            "q/disk.rs": "pub(in crate::q) fn read() {}\n",
            "q/browse.rs": "pub struct B;\nfn g() { super::disk::read() }\n",
        })
        _, normal, _ = use_graph.edges(root)
        self.assertNotIn(("q/disk.rs", "q/mod.rs"), normal)
        self.assertEqual(cycles(root), [])

    def test_a_cycle_through_tests_only_is_reported_apart(self):
        root = crate({
            "lib.rs": "mod a;\nmod b;\n",
            # Other attributes may stand between `#[cfg(test)]` and the module.
            "a.rs": "pub struct A;\n#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n"
                    "    use crate::b::B;\n}\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        })
        files, normal, test = use_graph.edges(root)
        self.assertEqual(use_graph.sccs(sorted(files.values()), normal), [])
        self.assertEqual(use_graph.sccs(sorted(files.values()), normal | test), [["a.rs", "b.rs"]])

    def test_fail_on_cycles_sets_the_exit_code(self):
        cyclic = crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        })
        acyclic = crate({"lib.rs": "mod a;\n", "a.rs": "pub struct A;\n"})
        run = lambda root: subprocess.run(
            [sys.executable, SCRIPT, root, "--fail-on-cycles"], capture_output=True, text=True
        )
        bad = run(cyclic)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("2 files: a.rs b.rs", bad.stdout)
        self.assertEqual(run(acyclic).returncode, 0)


if __name__ == "__main__":
    unittest.main()
