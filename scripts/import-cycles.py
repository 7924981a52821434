#!/usr/bin/env python3
"""Find import cycles between the modules of Rust crates.

Usage:
    python3 scripts/import-cycles.py [--edges] [CRATE_DIR ...]

CRATE_DIR is a directory holding a Cargo.toml and a src/ (crates/reactor,
bench-cli, ...). Without arguments, every crate of the workspace is
checked (crates/*/ and bench-cli/). Each crate target (src/lib.rs,
src/main.rs, src/bin/*) is its own graph. Prints, per target, the cycles
found: groups of modules that depend on each other (strongly connected
components of more than one module), each with the references that close
it; with --edges, every edge too (to see a crate's layering). Exits 1
if any target has a cycle, 0 otherwise, 2 on bad arguments.

What counts as an edge A -> B (A, B modules; a textual approximation,
no dependencies beyond python3):

* A's file names B, or an item defined in B: in a `use` (`use crate::b::X`,
  `use super::X`, `use b::X` for a child b, `use self::...`), or in a path
  in code (`crate::b::f()`, `super::X`, `child::Y`, or a path through a
  name A imported).
* A path through a re-export is followed to the module that defines the
  item: `crate::Handle` is an edge to the module `Handle` comes from, not
  to the crate root. So a facade (a lib.rs or mod.rs that declares modules
  and re-exports their items) does not put every module in a cycle with it.
* A `pub use` (any visibility) is an edge from A only if A's own code uses
  the name too; re-exporting alone is not a dependency. A private `use` is
  always an edge (the compiler warns about unused ones).
* `mod b;` alone is containment, not an edge. A parent that uses its
  child's items depends on the child; a child that uses items defined in
  its parent (or the parent's private imports) depends on the parent; both
  at once is a cycle.
* Ignored: comments (doc links included), string and char literals, items
  under a test-only cfg (`#[cfg(test)] mod tests { .. }`, `mod tests;` and
  its file, `#[cfg(all(test, ..))]` items), files under tests/, method
  calls and bare names (they carry no module path: a call to a method
  lands on the module that defines the type, wherever the impl block is),
  extern crates and std, `#[path]` attributes.

Cycles are looked for twice: between modules, and between sibling
modules (children of one parent) where each stands for its subtree. The
second finds a circle the first misses when it runs through a re-export:
`a` uses `b::X`, which `b` re-exports from its child `b::inner`, while
`b`'s own code uses `a`. The first sees `a -> b::inner` and `b -> a`, no
cycle; but `a` and `b` (with what it contains) still depend on each other,
so neither can be understood, moved or tested without the other.

A well-layered crate passes: leaves that use nothing in the crate, layers
that use only the ones below them, a root that declares and re-exports.
"""

import os
import re
import sys
from pathlib import Path

KEYWORDS = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn",
    "else", "enum", "extern", "false", "fn", "for", "if", "impl", "in",
    "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "union",
}


# --------------------------------------------------------------- lexing --


def strip_comments_and_literals(text):
    """Blanks comments and string/char literals, keeping newlines (so line
    numbers still hold) and everything else."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif re.match(r'b?r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '\''), else a lifetime.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'", text[i:])
            if m:
                out.append(blank(m.group(0)))
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_close(text, i, open_ch, close_ch):
    """Index just past the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def parse_cfg(s):
    """Parses a cfg predicate into (name, args) trees; strings are blank."""
    tokens = re.findall(r"[A-Za-z_]\w*|[(),=]", s)
    pos = 0

    def pred():
        nonlocal pos
        if pos >= len(tokens):
            return ("", [])
        name = tokens[pos]
        pos += 1
        args = []
        if pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            while pos < len(tokens) and tokens[pos] != ")":
                if tokens[pos] == ",":
                    pos += 1
                    continue
                args.append(pred())
            pos += 1
        elif pos < len(tokens) and tokens[pos] == "=":
            pos += 1  # key = "value": the value is blanked
        return (name, args)

    return pred()


def test_only(p):
    name, args = p
    if name == "test" and not args:
        return True
    if name == "all":
        return any(test_only(a) for a in args)
    if name == "any":
        return bool(args) and all(test_only(a) for a in args)
    return False


def item_end(text, i):
    """Index just past the item starting at or after text[i]: past its
    `;` or its braced body."""
    n = len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if text.startswith("#[", i):
            i = match_close(text, i + 1, "[", "]")
        else:
            break
    depth = 0
    while i < n:
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth <= 0:
            return i + 1
        elif c == "{" and depth <= 0:
            return match_close(text, i, "{", "}")
        i += 1
    return n


ATTR_CFG = re.compile(r"#\s*(!?)\s*\[\s*cfg\s*\(")


def strip_test_items(text):
    """Blanks items under a test-only cfg. Returns (text, file_is_test)."""
    out = text
    pos = 0
    while True:
        m = ATTR_CFG.search(out, pos)
        if not m:
            return out, False
        paren = out.index("(", m.end() - 1)
        close = match_close(out, paren, "(", ")")
        attr_end = out.find("]", close) + 1
        if not test_only(parse_cfg(out[paren + 1:close - 1])):
            pos = attr_end
            continue
        if m.group(1) == "!":
            return "", True  # #![cfg(test)]: the whole file
        end = item_end(out, attr_end)
        blanked = "".join("\n" if c == "\n" else " " for c in out[m.start():end])
        out = out[:m.start()] + blanked + out[end:]
        pos = m.start()


# ------------------------------------------------------------ use trees --


def expand_use_tree(s):
    """`a::{b, c::d as e, f::*}` -> [(['a','b'], 'b'), (['a','c','d'], 'e'),
    (['a','f'], '*')]. `self` in braces names the prefix itself."""
    tokens = re.findall(r"\$?[A-Za-z_]\w*|::|[{},*]", s)
    pos = 0
    out = []

    def tree(prefix):
        nonlocal pos
        path = list(prefix)
        while pos < len(tokens):
            t = tokens[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    tree(path)
                pos += 1
                return
            elif t == "*":
                pos += 1
                out.append((path, "*"))
                return
            elif t in (",", "}"):
                break
            else:
                pos += 1
                if t == "as":
                    alias = tokens[pos]
                    pos += 1
                    if alias != "_":
                        out.append((path, alias))
                    return
                if t == "self" and path:
                    # `a::{self}` imports a; leading `self::` is a path.
                    if pos < len(tokens) and tokens[pos] == "::":
                        path.append(t)
                        continue
                    out.append((path, path[-1]))
                    return
                path.append(t)
        if path and path != list(prefix):
            out.append((path, path[-1]))

    while pos < len(tokens):
        if tokens[pos] == ",":
            pos += 1
            continue
        before = pos
        tree([])
        if pos == before:
            pos += 1
    return out


USE_STMT = re.compile(r"(?<![\w$])(pub\s*(\([^)]*\))?\s*)?use\s+([^;]*);")
CODE_PATH = re.compile(r"(?<![\w:$])(\$?[A-Za-z_]\w*)((?:\s*::\s*[A-Za-z_]\w*)+)")
DEF = re.compile(r"(?<![\w$])(?:fn|struct|enum|trait|type|const|static|union|mod)\s+([A-Za-z_]\w*)")
MACRO_DEF = re.compile(r"macro_rules!\s*([A-Za-z_]\w*)")
MOD_DECL = re.compile(r"(?<![\w$])(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+([A-Za-z_]\w*)\s*([;{])")
VIS_IN = re.compile(r"pub\s*\(\s*in\s+[^)]*\)")


class Module:
    def __init__(self, path, file, text, dir_for_children):
        self.path = path  # tuple of names; () is the crate root
        self.file = file
        self.text = text  # comments, literals and test items blanked
        self.dir = dir_for_children
        self.children = {}  # name -> Module
        self.defs = set()
        self.uses = []  # (is_pub, segments, name, line)
        self.paths = []  # (segments, line, shown)
        self.code = ""  # text without use statements

    @property
    def name(self):
        return "crate" if not self.path else "::".join(self.path)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def load_module(path, file, text, dir_for_children, modules, warnings):
    """Reads one module (and, recursively, its children) into `modules`."""
    text, is_test = strip_test_items(strip_comments_and_literals(text))
    if is_test:
        return None
    text = VIS_IN.sub(lambda m: " " * len(m.group(0)), text)
    mod = Module(path, file, text, dir_for_children)
    modules[path] = mod
    # Child modules; an inline one's body belongs to it, not to us.
    body = text
    pos = 0
    while True:
        m = MOD_DECL.search(text, pos)
        if not m:
            break
        name, kind = m.group(1), m.group(2)
        pos = m.end()
        if kind == "{":
            start = m.end() - 1
            end = match_close(text, start, "{", "}")
            pos = end
            inner = text[start + 1:end - 1]
            # Keep line numbers: the child's text starts at its offset.
            pad = "".join("\n" if c == "\n" else " " for c in text[:start + 1])
            child = load_module(path + (name,), file, pad + inner, dir_for_children / name, modules, warnings)
            if child:
                mod.children[name] = child
            body = body[:start + 1] + "".join("\n" if c == "\n" else " " for c in inner) + body[end - 1:]
        else:
            candidates = [dir_for_children / (name + ".rs"), dir_for_children / name / "mod.rs"]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                warnings.append(f"{rel(file)}: `mod {name};` has no file ({rel(candidates[0])} or {rel(candidates[1])})")
                continue
            child_dir = found.parent if found.name == "mod.rs" else found.parent / found.stem
            child = load_module(path + (name,), found, found.read_text(), child_dir, modules, warnings)
            if child:
                mod.children[name] = child
    mod.defs = {m.group(1) for m in DEF.finditer(body)} - KEYWORDS
    mod.defs |= {m.group(1) for m in MACRO_DEF.finditer(body)}
    code = body
    for m in USE_STMT.finditer(body):
        is_pub = m.group(1) is not None
        line = line_of(body, m.start())
        for segments, name in expand_use_tree(m.group(3)):
            if segments and segments[0] == "":
                continue
            mod.uses.append((is_pub, segments, name, line))
        code = code[:m.start()] + " " * (m.end() - m.start()) + code[m.end():]
    mod.code = code
    for m in CODE_PATH.finditer(code):
        segments = [m.group(1)] + re.findall(r"[A-Za-z_]\w*", m.group(2))
        mod.paths.append((segments, line_of(code, m.start()), re.sub(r"\s+", "", m.group(0))))
    return mod


# ----------------------------------------------------------- resolution --


class Crate:
    def __init__(self, modules):
        self.modules = modules

    def imports(self, mod, name):
        """The uses in `mod` that bring `name` into scope."""
        return [u for u in mod.uses if u[2] == name]

    def resolve(self, mod, segments, depth=0):
        """The module a path written in `mod` lands in: (module, rest) where
        rest is what is left of the path inside it (an item, or nothing when
        the path names the module); None if it leaves the crate."""
        if depth > 20 or not segments:
            return None
        first, rest = segments[0], segments[1:]
        if first in ("crate", "$crate"):
            cur = self.modules[()]
        elif first == "super":
            cur = mod
            while segments and segments[0] == "super":
                if not cur.path:
                    return None
                cur = self.modules[cur.path[:-1]]
                segments = segments[1:]
            rest = segments
        elif first == "self":
            cur = mod
        elif first in mod.children:
            cur = mod.children[first]
        else:
            found = self.through_import(mod, first, depth)
            if found is None:
                return None
            cur, inner = found
            if inner:
                return cur, inner + rest
        return self.walk(cur, rest, depth)

    def through_import(self, mod, name, depth):
        for _, segments, _, _ in self.imports(mod, name):
            if segments[-1] == "self":
                segments = segments[:-1]
            found = self.resolve(mod, segments, depth + 1)
            if found is not None:
                return found
        return None

    def walk(self, cur, rest, depth):
        while rest:
            seg = rest[0]
            if seg in cur.children:
                cur, rest = cur.children[seg], rest[1:]
                continue
            if seg not in cur.defs:
                found = self.through_import(cur, seg, depth)
                if found is not None:
                    target, inner = found
                    if inner:
                        return target, inner + rest[1:]
                    cur, rest = target, rest[1:]
                    continue
                for is_pub, segments, name, _ in cur.uses:
                    if name == "*":
                        src = self.resolve(cur, segments, depth + 1)
                        if src and not src[1] and (seg in src[0].defs or seg in src[0].children):
                            return self.walk(src[0], rest, depth + 1)
            return cur, rest
        return cur, []

    def edges(self):
        """{(a, b): [(file, line, what)]} over module paths."""
        out = {}

        def add(mod, target, line, what):
            if target is None:
                return
            t = target[0].path
            if t != mod.path:
                out.setdefault((mod.path, t), []).append((mod.file, line, what))

        for mod in self.modules.values():
            for is_pub, segments, name, line in mod.uses:
                shown = "use " + "::".join(segments) + ("::*" if name == "*" else "")
                if name == "*":
                    if not is_pub:
                        add(mod, self.resolve(mod, segments), line, shown)
                    continue
                if is_pub and not re.search(r"(?<![\w$])" + re.escape(name) + r"\b", mod.code):
                    continue  # a re-export only: not a dependency
                path = segments[:-1] if segments[-1] == "self" else segments
                add(mod, self.resolve(mod, path), line, shown)
            for segments, line, shown in mod.paths:
                first = segments[0]
                if first in ("crate", "$crate", "super", "self") or first in mod.children or self.imports(mod, first):
                    add(mod, self.resolve(mod, segments), line, shown)
        return out


def sibling_edges(modules, edges):
    """The edges between sibling modules (children of one parent), where a
    module stands for its whole subtree: a -> b for siblings a and b when
    something in a's subtree depends on something in b's. {(a, b): refs}."""
    out = {}
    for (src, dst), refs in edges.items():
        n = 0
        while n < len(src) and n < len(dst) and src[n] == dst[n]:
            n += 1
        if n == len(src) or n == len(dst):
            continue  # one contains the other: parent and descendant
        a, b = src[:n + 1], dst[:n + 1]
        out.setdefault((a, b), []).extend(refs)
    return out


def strongly_connected(nodes, edges):
    """Tarjan's algorithm (iterative); returns the components."""
    succ = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for j in range(i, len(succ[v])):
                w = succ[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return comps


# ---------------------------------------------------------------- main --


def crate_name(crate_dir):
    try:
        text = (crate_dir / "Cargo.toml").read_text()
    except OSError:
        return crate_dir.name
    m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else crate_dir.name


def targets(src):
    found = []
    for root, label in ((src / "lib.rs", "lib"), (src / "main.rs", "bin")):
        if root.is_file():
            found.append((root, label))
    bins = src / "bin"
    if bins.is_dir():
        for p in sorted(bins.iterdir()):
            if p.suffix == ".rs":
                found.append((p, "bin " + p.stem))
            elif (p / "main.rs").is_file():
                found.append((p / "main.rs", "bin " + p.name))
    return found


def rel(p):
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def check_crate(crate_dir, show_edges=False):
    """Prints the crate's cycles; returns how many it has."""
    name = crate_name(crate_dir)
    src = crate_dir / "src"
    roots = targets(src)
    if not roots:
        print(f"{name}: no src/lib.rs, src/main.rs or src/bin/ in {rel(crate_dir)}")
        return 0
    total = 0
    for root, label in roots:
        modules, warnings = {}, []
        load_module((), root, root.read_text(), root.parent, modules, warnings)
        for w in warnings:
            print(f"{name} ({label}): warning: {w}", file=sys.stderr)
        crate = Crate(modules)
        edges = crate.edges()
        cycles = [sorted(c) for c in strongly_connected(list(modules), edges) if len(c) > 1]
        cycles.sort()
        # Between sibling subtrees: an edge into or out of a module's
        # descendants is the module's own (see the docs).
        lifted = sibling_edges(modules, edges)
        known = [set(c) for c in cycles]
        subtree_cycles = sorted(
            sorted(c) for c in strongly_connected(list(modules), lifted)
            if len(c) > 1 and set(c) not in known
        )
        cycles += subtree_cycles
        total += len(cycles)
        show = lambda p: "crate" if not p else "::".join(p)
        if not cycles:
            print(f"{name} ({label}): no cycles ({len(modules)} modules, {len(edges)} edges)")
        else:
            print(f"{name} ({label}): {len(cycles)} cycle(s)")
        if show_edges:
            for (a, b), refs in sorted(edges.items()):
                file, line, what = refs[0]
                print(f"  edge {show(a)} -> {show(b)}: {rel(file)}:{line} {what}")
        for k, comp in enumerate(cycles, 1):
            members = set(comp)
            through = comp in subtree_cycles
            kind = " (between sibling modules, through their submodules)" if through else ""
            print(f"  cycle {k}{kind}: {', '.join(show(p) for p in comp)}")
            for (a, b), refs in sorted((lifted if through else edges).items()):
                if a in members and b in members:
                    file, line, what = refs[0]
                    more = f" (+{len(refs) - 1} more)" if len(refs) > 1 else ""
                    print(f"    {show(a)} -> {show(b)}: {rel(file)}:{line} {what}{more}")
    return total


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    show_edges = "--edges" in argv
    argv = [a for a in argv if a != "--edges"]
    if argv:
        dirs = [Path(a) for a in argv]
    else:
        top = Path(__file__).resolve().parent.parent
        dirs = sorted(p for p in (top / "crates").iterdir() if (p / "Cargo.toml").is_file())
        dirs.append(top / "bench-cli")
    bad = [d for d in dirs if not (d / "src").is_dir()]
    if bad:
        for d in bad:
            print(f"import-cycles: {d}: not a crate directory (no src/)", file=sys.stderr)
        return 2
    cycles = sum(check_crate(d, show_edges) for d in dirs)
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
