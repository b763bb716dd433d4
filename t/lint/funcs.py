#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""funcs.py -- function size and parameter lists in the libraries' C files.

Every function defined in a .c file under the folders given: its body
(from the line of its opening brace to the line of its closing one) may
have at most --max-lines lines, and, unless it is public (declared in a
te/*.h header of the folders), at most --max-params parameters (issue 30:
short functions; structs, not flag lists).

usage: funcs.py [--max-lines N] [--max-params N] DIR...
Prints each finding and exits 1 when there is one.
"""
import glob
import os
import re
import sys


def strip(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return re.sub(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', '', text, flags=re.M)


HEAD = re.compile(r'^(?!(?:typedef|extern|struct\s+\w+\s*\{|enum|union)\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(',
                  re.M)
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do'}


def params(args):
    depth, n = 0, 1
    for ch in args:
        depth += ch == '('
        depth -= ch == ')'
        n += ch == ',' and depth == 0
    return 0 if args.strip() in ('', 'void') else n


def functions(text):
    """(name, first line, body lines, parameter count) of each definition."""
    for m in HEAD.finditer(text):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        j, depth = m.end() - 1, 0
        while j < len(text):
            depth += text[j] == '('
            depth -= text[j] == ')'
            if depth == 0:
                break
            j += 1
        args = text[m.end():j]
        k = j + 1
        while k < len(text) and text[k] in ' \t\n':
            k += 1
        if k >= len(text) or text[k] != '{':
            continue
        depth, e = 0, k
        while e < len(text):
            depth += text[e] == '{'
            depth -= text[e] == '}'
            if depth == 0:
                break
            e += 1
        first = text.count('\n', 0, k) + 1
        last = text.count('\n', 0, e) + 1
        yield name, text.count('\n', 0, m.start()) + 1, last - first + 1, params(args)


def main(argv):
    max_lines, max_params, dirs = 120, 8, []
    i = 0
    while i < len(argv):
        if argv[i] == '--max-lines':
            max_lines = int(argv[i + 1])
            i += 2
        elif argv[i] == '--max-params':
            max_params = int(argv[i + 1])
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    public = set()
    for d in dirs:
        for h in glob.glob(os.path.join(d, 'te', '*.h')):
            for m in re.finditer(r'\b([a-z]\w*)\s*\(', strip(open(h).read())):
                public.add(m.group(1))
    bad = 0
    for d in dirs:
        for root, _, names in sorted(os.walk(d)):
            for n in sorted(names):
                if not n.endswith('.c'):
                    continue
                f = os.path.join(root, n)
                for name, line, lines, np in functions(strip(open(f, errors='replace').read())):
                    if lines > max_lines:
                        print('%s:%d: %s is %d lines long (at most %d)' % (f, line, name, lines,
                                                                         max_lines))
                        bad = 1
                    if np > max_params and name not in public:
                        print('%s:%d: %s takes %d parameters (at most %d outside the public API: '
                              'pass a struct)' % (f, line, name, np, max_params))
                        bad = 1
    return bad


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
