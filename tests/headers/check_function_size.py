#!/usr/bin/env python3
"""No function of the scanned directories is longer than a limit (lines from the first line of
its signature to its closing brace), so that each reads as a list of named steps.

Counts C++ function bodies by their braces, with comments, string and character literals and
preprocessor lines removed: a brace at namespace, extern "C" or class scope whose header holds a
parameter list opens a function (member functions written in a class included); lambdas count in
the function that holds them.

The allowlist (--allow FILE) names the functions that may stay longer, one a line:
    path/from/root.cpp function_name  # why it is a table, not a list of steps
An entry that no longer matches a function over the limit is an error too (the list stays true).
Paths are relative to --root (default: the current directory); --exclude DIR (repeatable) leaves
a directory out of the scan.
Usage: check_function_size.py [--limit N] [--list] [--root DIR] [--allow FILE] [--exclude DIR]...
       DIRECTORY...
"""
import argparse
import pathlib
import re
import sys

LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
RAW = re.compile(r'"([^()\\\s"]{0,16})\(')
# A preprocessor line and its backslash continuations.
PREPROCESSOR = re.compile(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', re.M)
KEYWORD = re.compile(r'\b(namespace|struct|class|union|enum)\b')


def digit_separator(text, i):
    """Whether the quote at i separates digits of a number (C++14 0x7264'6d78)."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] == '_'):
        j -= 1
    return j < i and text[j].isdigit() and i + 1 < len(text) and text[i + 1].isalnum()


def strip(text):
    """The source with comments, literals and preprocessor lines blanked, line breaks kept."""
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
        elif text[i] == '"' and i > 0 and text[i - 1] == 'R' and RAW.match(text, i):
            # A raw string literal R"delim( ... )delim": nothing inside it is code.
            delim = RAW.match(text, i).group(1)
            j = text.find(')' + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
            out.append('""' + '\n' * text.count('\n', i, j))
            i = j
        elif text[i] == "'" and digit_separator(text, i):
            i += 1  # 1'000'000: a digit separator, not a character literal
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
    # After the comments are gone (a '#' in a comment is not a directive). An #if/#else pair that
    # opened a brace twice would unbalance the count; the tree has none (the stack check below
    # reports one).
    return PREPROCESSOR.sub(lambda m: '\n' * m.group(0).count('\n'), ''.join(out))


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
                if (k and k.group(1) == 'namespace') or re.fullmatch(r'extern\s*""', h):
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
            if not stack:
                sys.exit(f'{path}:{line}: a closing brace closes nothing: the count is off')
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
    if stack:
        sys.exit(f'{path}:{stack[-1][1]}: a brace opened here is never closed: the count is off')
    return found


def read_allowlist(path):
    """{(path, function): reason} from the allowlist file."""
    allowed = {}
    for number, raw in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        line, _, reason = raw.partition('#')
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not reason.strip():
            sys.exit(f'{path}:{number}: expected "path function  # reason", got: {raw}')
        allowed[(fields[0], fields[1])] = reason.strip()
    return allowed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=80)
    ap.add_argument('--list', action='store_true', help='print every function, longest first')
    ap.add_argument('--root', default='.', help='the paths of the allowlist are relative to it')
    ap.add_argument('--allow', help='allowlist file: "path function  # reason" per line')
    ap.add_argument('--exclude', action='append', default=[], help='directory left out')
    ap.add_argument('dirs', nargs='+')
    args = ap.parse_args()
    root = pathlib.Path(args.root).resolve()
    excluded = [(root / e).resolve() for e in args.exclude]
    allowed = read_allowlist(args.allow) if args.allow else {}
    rows = []
    for d in args.dirs:
        for p in sorted((root / d).rglob('*')):
            if p.suffix not in ('.cpp', '.hpp', '.h', '.cc') or not p.is_file():
                continue
            if any(p.resolve().is_relative_to(e) for e in excluded):
                continue
            rel = p.resolve()
            rel = (rel.relative_to(root) if rel.is_relative_to(root) else rel).as_posix()
            rows += [(n, rel, name, first) for name, first, n in functions(p)]
    rows.sort(key=lambda r: -r[0])
    over = [r for r in rows if r[0] > args.limit and (r[1], r[2]) not in allowed]
    allowed_over = {(r[1], r[2]) for r in rows if r[0] > args.limit}
    stale = sorted(k for k in allowed if k not in allowed_over)
    for n, p, name, first in rows if args.list else over:
        print(f'{p}:{first}: {name}: {n} lines' + (f' (over {args.limit})' if n > args.limit else ''))
    for p, name in stale:
        print(f'{args.allow}: {p} {name}: allowed but not over {args.limit} lines (or gone): '
              'remove the entry')
    if not over and not stale:
        print(f'{len(rows)} functions, none over {args.limit} lines but the {len(allowed)} '
              'allowed')
    return 1 if over or stale else 0


if __name__ == '__main__':
    sys.exit(main())
