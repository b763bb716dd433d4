#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""circles.py -- import circles between the source files of a library.

A file A depends on a file B when A names a symbol (a function or a global
object, not static) that B defines, or when A includes a header of B's
folder that includes A's own header back (header circles).  A circle is a
strongly connected set of two or more files.  Files inside one folder
given with --allow (a backend's own folder, whose files are one unit) are
merged into that folder before the circles are looked for; with
--folders DIR, every subfolder of DIR (a kernel family, a backend, the
service engine) is one unit, and only circles between units count;
with --same-folder-ok, a circle whose files all lie in one folder is
not reported (a family's or a subsystem's files taken as one part).
--known FILE lists dependencies taken out of the graph before circles
are looked for ("from to reason" a line, units as printed: a file, or a
folder with its trailing /; # comments): calls up a layer that are
known and not fixed yet.  A listed dependency that no longer exists is
reported too, so that the list only shrinks.

usage: circles.py [--allow DIR]... [--folders DIR]... [--same-folder-ok] [--known FILE] DIR...
Prints every circle, one per line ("a.c -> b.c -> a.c"), and exits 1 when
there is one; 0 when there is none.
"""
import os
import re
import sys

DEF_OBJ = re.compile(
    r'^(?!static\b)(?:TE_EXPORT\s+)?(?:const\s+)?(?:struct|enum|union)?\s*\w+\s+(?:\*\s*)?(?:const\s+)?'
    r'([A-Za-z_]\w*)\s*(?:\[[^\]]*\])*\s*=')
TOKEN = re.compile(r'[A-Za-z_]\w*')
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'else', 'do'}


def strip(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return text


def definitions(text):
    """Names of the non-static functions and objects this file defines."""
    names = set()
    starts = [m.start() for m in re.finditer(r'^(?=[A-Za-z_])', text, flags=re.M)]
    for at in starts:
        line = text[at:text.find('\n', at)]
        if re.match(r'(static|typedef|extern)\b', line):
            continue
        m = DEF_OBJ.match(line)
        if m:
            names.add(m.group(1))
            continue
        m = re.match(r'(?:TE_EXPORT\s+)?[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(', line)
        if not m or m.group(1) in KEYWORDS:
            continue
        j, depth = at + m.end() - 1, 0
        while j < len(text):
            if text[j] == '(':
                depth += 1
            elif text[j] == ')':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        after = text[j + 1:j + 200].lstrip()
        after = re.sub(r'^__attribute__\s*\(\(.*?\)\)\s*', '', after, flags=re.S)
        if after.startswith('{'):
            names.add(m.group(1))
    return names


def unit(path, allow, folders):
    for a in allow:
        if path.startswith(a.rstrip('/') + '/'):
            return a.rstrip('/') + '/'
    for d in folders:
        d = d.rstrip('/') + '/'
        if path.startswith(d) and '/' in path[len(d):]:
            return d + path[len(d):].split('/')[0] + '/'
    return path


def sccs(graph):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def path_in(graph, comp):
    """One cycle through the component, for the message."""
    start = comp[0]
    members = set(comp)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in members:
                continue
            if w == start:
                chain = [v]
                while prev[chain[-1]] is not None:
                    chain.append(prev[chain[-1]])
                return list(reversed(chain)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def read_known(path):
    known = set()
    for n, line in enumerate(open(path), 1):
        words = line.split('#', 1)[0].split()
        if not words:
            continue
        if len(words) < 3:
            sys.exit('%s:%d: "from to reason" expected' % (path, n))
        known.add((words[0], words[1]))
    return known


def main(argv):
    allow, folders, dirs, same_ok, known = [], [], [], False, set()
    i = 0
    while i < len(argv):
        if argv[i] == '--allow':
            allow.append(argv[i + 1])
            i += 2
        elif argv[i] == '--same-folder-ok':
            same_ok = True
            i += 1
        elif argv[i] == '--known':
            known = read_known(argv[i + 1])
            i += 2
        elif argv[i] == '--folders':
            folders.append(argv[i + 1])
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    files = []
    for d in dirs:
        for root, _, names in os.walk(d):
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith('.c')]
    text = {f: strip(open(f, encoding='utf-8', errors='replace').read()) for f in files}
    owner = {}
    for f in files:
        for name in definitions(text[f]):
            owner.setdefault(name, set()).add(f)
    graph = {}
    for f in files:
        u = unit(f, allow, folders)
        graph.setdefault(u, set())
        # a struct, enum or union tag names a type, not a symbol
        uses = re.sub(r'\b(?:struct|enum|union)\s+\w+', ' ', text[f])
        for tok in set(TOKEN.findall(uses)):
            for g in owner.get(tok, ()):
                v = unit(g, allow, folders)
                if v != u:
                    graph[u].add(v)
    stale = sorted(e for e in known if e[0] in graph and e[1] not in graph[e[0]])
    for u, v in known:
        graph.get(u, set()).discard(v)
    bad = sccs(graph)
    if same_ok:
        bad = [c for c in bad if len({os.path.dirname(f.rstrip('/')) for f in c}) > 1]
    for comp in bad:
        print('circle of %d files: %s' % (len(comp), ' -> '.join(path_in(graph, comp))))
        print('  all of them: %s' % ' '.join(comp))
    for u, v in stale:
        print('%s -> %s is listed as known but is gone: take it off the list' % (u, v))
    return 1 if bad or stale else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
