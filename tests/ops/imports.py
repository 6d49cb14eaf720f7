"""The import graph of src/, file by file and room by room (a room is a top-level module).

Edges come from `crate::a::b` paths, `super::…` paths and `use child::…` lines outside
`#[cfg(test)] mod tests`. Exits 1 when files import each other in a cycle or rooms do (the
layering docs/code-layout.md draws); `--rooms` also prints each room's imports.

Usage: python3 tests/ops/imports.py [src] [--rooms]
"""
import collections
import os
import re
import sys


def modules(root):
    """Module path (tuple) -> file, for every .rs file under root."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[:-3].split("/")
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            found[tuple(parts)] = path
    return found


def imports(found):
    """Module -> the set of modules it names, its own submodules left out."""
    def resolve(path):
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in found:
                return tuple(path[:n])
        return None

    edges = {}
    for module, path in found.items():
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        is_mod_rs = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
        out = set()
        for m in re.finditer(r"crate::((?:[a-z_0-9]+::)*[a-zA-Z_0-9]+)", text):
            out.add(resolve(m.group(1).split("::")))
        for m in re.finditer(r"\b((?:super::)+)((?:[a-z_0-9]+::)*[a-zA-Z_0-9]+)", text):
            ups = m.group(1).count("super::")
            keep = len(module) - (ups - 1) if is_mod_rs else len(module) - ups
            base = list(module[:max(0, keep)])
            target = resolve(base + m.group(2).split("::"))
            if target != tuple(base):
                out.add(target)
        here = list(module) if is_mod_rs else list(module[:-1])
        for m in re.finditer(r"^\s*(?:pub(?:\([a-z]+\))? )?use (?:self::)?([a-z_0-9]+)::", text, flags=re.M):
            out.add(resolve(here + [m.group(1)]))
        edges[module] = {t for t in out if t is not None and t != module and t[:len(module)] != module}
    return edges


def cycles(edges):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    edges = imports(modules(args[0] if args else "src"))
    rooms = collections.defaultdict(set)
    for a, outs in edges.items():
        for b in outs:
            if a and b and a[0] != b[0]:
                rooms[(a[0],)].add((b[0],))
    if "--rooms" in sys.argv:
        for room in sorted(rooms):
            print(room[0], "->", ", ".join(sorted(r[0] for r in rooms[room])))
    bad = [("file", c) for c in cycles(edges)] + [("room", c) for c in cycles(rooms)]
    for kind, component in bad:
        print(f"{kind} import cycle:", ", ".join("/".join(m) or "lib" for m in sorted(component)))
    if bad:
        sys.exit(1)
    print(f"imports: {len(edges)} modules, no file or room import cycle")


if __name__ == "__main__":
    main()
