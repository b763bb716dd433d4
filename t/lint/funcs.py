#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""funcs.py -- function size and parameter lists in C and CUDA sources.

Every function defined in a .c, .h, .cu or .cuh file under the folders
given (CUDA's __global__ and __device__ functions and templates
included): its body (from the line of its opening brace to the line of
its closing one) may have at most --max-lines lines, and, unless it is
public (declared in a te/*.h header of the libraries), at most
--max-params parameters (issue 30: short functions; structs, not flag
lists).  A function named in the --allow FILE list ("path name reason"
a line, # comments) may stay over; an entry whose function is no longer
over, or no longer there, is reported too, so that the list stays true.

usage: funcs.py [--max-lines N] [--max-params N] [--allow FILE] DIR...
Prints each finding and exits 1 when there is one.
"""
import glob
import os
import re
import sys

SUFFIXES = ('.c', '.h', '.cu', '.cuh')


def blank(m):
    """The match as blanks, its newlines kept (line numbers stay true)."""
    return re.sub(r'[^\n]', ' ', m.group(0))


def balanced(text, at, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[at]."""
    depth = 0
    for j in range(at, len(text)):
        depth += text[j] == open_ch
        depth -= text[j] == close_ch
        if depth == 0:
            return j + 1
    return len(text)


def drop_brackets(text, word, open_ch, close_ch):
    """Blank out 'word<...>' or 'word(...)' (templates, attributes)."""
    out, pos = [], 0
    for m in re.finditer(r'\b' + word + r'\s*(?=' + re.escape(open_ch) + ')', text):
        if m.start() < pos:
            continue
        end = balanced(text, m.end(), open_ch, close_ch)
        out.append(text[pos:m.start()])
        out.append(re.sub(r'[^\n]', ' ', text[m.start():end]))
        pos = end
    out.append(text[pos:])
    return ''.join(out)


def strip(text):
    text = re.sub(r'/\*.*?\*/', blank, text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    text = re.sub(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', blank, text, flags=re.M)
    # CUDA and C++: what stands before a function's name and is no type
    text = drop_brackets(text, 'template', '<', '>')
    for attr in ('__launch_bounds__', '__maxnreg__', '__attribute__', '__align__'):
        text = drop_brackets(text, attr, '(', ')')
    return re.sub(r'\bextern\s*""', lambda m: ' ' * len(m.group(0)), text)


HEAD = re.compile(r'^(?!(?:typedef|extern|struct\s+\w+\s*\{|enum|union)\b)[A-Za-z_][\w \t\*&]*?\b([A-Za-z_]\w*)\s*\(',
                  re.M)
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do'}


def params(args):
    depth, n = 0, 1
    for ch in args:
        depth += ch in '(<'
        depth -= ch in ')>'
        n += ch == ',' and depth == 0
    return 0 if args.strip() in ('', 'void') else n


def functions(text):
    """(name, first line, body lines, parameter count) of each definition."""
    for m in HEAD.finditer(text):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        j = balanced(text, m.end() - 1, '(', ')') - 1
        args = text[m.end():j]
        k = j + 1
        while k < len(text) and text[k] in ' \t\n':
            k += 1
        # a C++ qualifier between the parameters and the body
        q = re.match(r'(?:const|noexcept)\b\s*', text[k:])
        if q:
            k += q.end()
        if k >= len(text) or text[k] != '{':
            continue
        e = balanced(text, k, '{', '}') - 1
        first = text.count('\n', 0, k) + 1
        last = text.count('\n', 0, e) + 1
        yield name, text.count('\n', 0, m.start()) + 1, last - first + 1, params(args)


def read_allow(path):
    allow = {}
    for n, line in enumerate(open(path), 1):
        line = line.split('#', 1)[0].split()
        if not line:
            continue
        if len(line) < 3:
            sys.exit('%s:%d: "path function reason" expected' % (path, n))
        allow[(line[0], line[1])] = False
    return allow


def main(argv):
    max_lines, max_params, dirs, allow = 120, 8, [], {}
    i = 0
    while i < len(argv):
        if argv[i] == '--max-lines':
            max_lines = int(argv[i + 1])
            i += 2
        elif argv[i] == '--max-params':
            max_params = int(argv[i + 1])
            i += 2
        elif argv[i] == '--allow':
            allow = read_allow(argv[i + 1])
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    public = set()
    for h in glob.glob(os.path.join('*', 'te', '*.h')):
        for m in re.finditer(r'\b([a-z]\w*)\s*\(', strip(open(h).read())):
            public.add(m.group(1))
    bad = 0
    seen = set()
    for d in dirs:
        top = [d] if os.path.isfile(d) else []
        walk = [(os.path.dirname(d), [], [os.path.basename(d)])] if top else sorted(os.walk(d))
        for root, _, names in walk:
            for n in sorted(names):
                f = os.path.join(root, n)
                if not n.endswith(SUFFIXES) or f in seen:
                    continue
                seen.add(f)
                for name, line, lines, np in functions(strip(open(f, errors='replace').read())):
                    over = []
                    if lines > max_lines:
                        over.append('is %d lines long (at most %d)' % (lines, max_lines))
                    if np > max_params and name not in public:
                        over.append('takes %d parameters (at most %d outside the public API: '
                                    'pass a struct)' % (np, max_params))
                    if not over:
                        continue
                    if (f, name) in allow:
                        allow[(f, name)] = True
                        continue
                    for o in over:
                        print('%s:%d: %s %s' % (f, line, name, o))
                    bad = 1
    for (f, name), used in sorted(allow.items()):
        if not used and f in seen:
            print('%s: %s is listed as an exception but is within the limits: '
                  'take it off the list' % (f, name))
            bad = 1
    return bad


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
