"""tessel.torch's modules all import, and the imports between them form no cycle.

The graph is read from the package's source with `ast`: every `import` and
`from ... import` anywhere in a module, at its top or inside a function (an
import moved into a function still runs, so it does not hide a cycle), gives
an edge to each tessel.torch module it runs: the module named, each package
above it (importing tessel.torch.parallel.layers runs parallel/__init__.py
first), and in `from P import name` the submodule P.name when there is one.
Edges to the importing module's own packages are left out: Python runs a
package's __init__ before any module in it, so they add no order (and a name
such a package does not define yet fails every import, which the first test
sees).
"""
import ast
import importlib
import os
import pkgutil
import tempfile
import unittest

import tessel.torch

PACKAGE = "tessel.torch"


def package_modules():
    """{module name: source path} for every .py file of tessel.torch."""
    root = os.path.dirname(os.path.abspath(tessel.torch.__file__))
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, root)
        parts = [PACKAGE] + ([] if rel == "." else rel.split(os.sep))
        for f in sorted(files):
            if f.endswith(".py"):
                name = ".".join(parts if f == "__init__.py" else parts + [f[:-3]])
                out[name] = os.path.join(folder, f)
    return out


def _prefixes(name):
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph(modules):
    """{module: {tessel.torch modules its imports run}} (the module's docs)."""
    graph = {}
    for name, path in modules.items():
        is_package = path.endswith("__init__.py")
        own_package = name if is_package else name.rpartition(".")[0]
        ancestors = set(_prefixes(name))  # itself and the packages above it
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.update(_prefixes(alias.name))
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's own package up
                    base = own_package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                targets.update(_prefixes(base))
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t not in ancestors}
    return graph


def find_cycle(graph):
    """A list [m0, m1, ..., m0] of modules importing each other in a ring, or None."""
    done, on_path, path = set(), set(), []

    def visit(m):
        on_path.add(m)
        path.append(m)
        for n in sorted(graph[m]):
            if n in on_path:
                return path[path.index(n):] + [n]
            if n not in done:
                found = visit(n)
                if found:
                    return found
        on_path.discard(m)
        path.pop()
        done.add(m)
        return None

    for m in sorted(graph):
        if m not in done:
            found = visit(m)
            if found:
                return found
    return None


class ImportsTest(unittest.TestCase):
    def test_every_module_imports(self):
        modules = package_modules()
        found = {m.name for m in pkgutil.walk_packages(tessel.torch.__path__, PACKAGE + ".")}
        self.assertEqual(found | {PACKAGE}, set(modules),
                         "the source files are the modules Python finds")
        for name in sorted(modules):
            with self.subTest(module=name):
                importlib.import_module(name)

    def test_the_imports_form_no_cycle(self):
        graph = import_graph(package_modules())
        # The reading finds real edges (it is not acyclic for finding none).
        for a, b in [("tessel.torch.session", "tessel.torch.hybrid_mesh"),
                     ("tessel.torch.parallel.layers", "tessel.torch.session"),
                     ("tessel.torch.parallel.pipeline", "tessel.torch.parallel.layers"),
                     ("tessel.torch.optimizer", "tessel.torch.parallel"),
                     ("tessel.torch", "tessel.torch.parallel")]:
            self.assertIn(b, graph[a], f"{a} imports {b}")
        self.assertNotIn("tessel.torch", graph["tessel.torch.optimizer"],
                         "a module's own package is no edge")
        cycle = find_cycle(graph)
        self.assertIsNone(cycle, "tessel.torch's imports run in a ring: "
                          + " -> ".join(cycle or []))

    def test_a_ring_is_found(self):
        """The checker itself: a function-level import closing a ring counts."""
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}),
                         ["a", "b", "c", "a"])
        self.assertIsNone(find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}))
        with tempfile.TemporaryDirectory() as d:
            files = {}
            for name, text in [("tessel.torch.x", "from tessel.torch import y\n"),
                               ("tessel.torch.y", "def f():\n    import tessel.torch.x\n")]:
                files[name] = os.path.join(d, name + ".py")
                with open(files[name], "w") as f:
                    f.write(text)
            graph = import_graph(files)
        self.assertEqual(graph, {"tessel.torch.x": {"tessel.torch.y"},
                                 "tessel.torch.y": {"tessel.torch.x"}})
        self.assertIsNotNone(find_cycle(graph))


if __name__ == "__main__":
    unittest.main()
