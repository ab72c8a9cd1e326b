#!/usr/bin/env python3
"""No function of an application directory is longer than a limit (lines from the first line of
its signature to its closing brace), so that each reads as a list of named steps.

Counts C++ function bodies by their braces, comments, string and character literals removed:
a brace at namespace or class scope whose header holds a parameter list opens a function (member
functions written in a class included); lambdas count in the function that holds them.
Usage: check_function_size.py [--limit N] [--list] DIRECTORY...
"""
import argparse
import pathlib
import re
import sys

LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
KEYWORD = re.compile(r'\b(namespace|struct|class|union|enum)\b')


def strip(text):
    """The source with comments and literals blanked, line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif text[i] in '"\'':
            m = LITERAL.match(text, i)
            if not m:
                out.append(text[i])
                i += 1
                continue
            out.append(text[i] * 2)
            i = m.end()
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def functions(path):
    """(name, first line, line count) of each function defined in the file."""
    text = strip(path.read_text(errors='replace'))
    stack = []  # kinds of the open blocks: 'ns', 'class', 'func', 'other'
    header, header_line, line = '', 0, 1
    found = []
    for ch in text:
        if ch == '\n':
            line += 1
        if ch == '{':
            if stack and stack[-1][0] in ('func', 'other'):
                stack.append(('other', 0, ''))
            else:
                h = header.strip()
                k = KEYWORD.search(h.split('(')[0])
                if k and k.group(1) == 'namespace':
                    kind = 'ns'
                elif k and k.group(1) in ('struct', 'class', 'union'):
                    kind = 'class'
                elif ')' in h and not h.rstrip().endswith('=') and not k:
                    kind = 'func'
                else:
                    kind = 'other'
                name = re.findall(r'([~\w:]+)\s*\(', h)
                stack.append((kind, header_line, name[0] if name else h[:40]))
            header = ''
        elif ch == '}':
            if stack:
                kind, first, name = stack.pop()
                if kind == 'func':
                    found.append((name, first, line - first + 1))
            header = ''
        elif ch == ';' or (ch == ':' and header.strip() in ('public', 'private', 'protected')):
            header = ''
        else:
            if not header.strip() and not ch.isspace():
                header_line = line
            header += ch
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=80)
    ap.add_argument('--list', action='store_true', help='print every function, longest first')
    ap.add_argument('dirs', nargs='+')
    args = ap.parse_args()
    rows = []
    for d in args.dirs:
        for p in sorted(pathlib.Path(d).rglob('*')):
            if p.suffix in ('.cpp', '.hpp', '.h', '.cc') and p.is_file():
                rows += [(n, p, name, first) for name, first, n in functions(p)]
    rows.sort(key=lambda r: -r[0])
    over = [r for r in rows if r[0] > args.limit]
    for n, p, name, first in rows if args.list else over:
        print(f'{p}:{first}: {name}: {n} lines' + (f' (over {args.limit})' if n > args.limit else ''))
    if not over:
        print(f'{len(rows)} functions, none over {args.limit} lines')
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main())
