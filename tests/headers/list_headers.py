#!/usr/bin/env python3
"""List the public headers of rdmx, or check a list against the tree.

  list_headers.py SRC ROOT...                    print the include path (rdmx/...) of every .h/.hpp
                                                 under SRC/ROOT, one per line
  list_headers.py --check SRC ROOT... -- HDR...  exit 1 if the tree holds a header not in HDR...
                                                 (under ROOT... or any lib/*/include,
                                                 drivers/*/*/include)
"""
import pathlib
import sys


def headers(src, roots):
    out = []
    for root in roots:
        base = pathlib.Path(src) / root
        for p in sorted(base.rglob('*')):
            if p.suffix in ('.h', '.hpp') and p.is_file():
                out.append(p.relative_to(base).as_posix())
    return out


def main(argv):
    if argv and argv[0] == '--check':
        sep = argv.index('--')
        src, roots, checked = argv[1], argv[2:sep], set(argv[sep + 1:])
        # Every library's include directory, not only the configured roots: a new library whose
        # headers nobody added to tests/headers/meson.build is reported too.
        found = sorted(set(roots) | {p.relative_to(src).as_posix() for p in
                                     list(pathlib.Path(src).glob('lib/*/include')) +
                                     list(pathlib.Path(src).glob('drivers/*/*/include'))})
        roots = found
        missing = [h for h in headers(src, roots) if h not in checked]
        for h in missing:
            print(f'public header <{h}> is not compile-checked: reconfigure (meson setup '
                  '--reconfigure BUILD), and add a new library\'s include directory to hdr_roots '
                  'in tests/headers/meson.build')
        if missing:
            return 1
        print(f'{len(checked)} public headers compile on their own')
        return 0
    for h in headers(argv[0], argv[1:]):
        print(h)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
