#!/usr/bin/env python3
"""The layering rule of doc/guides/architecture.md, checked on every #include <rdmx/...> line.

Each library directory may include only the rdmx include paths listed for it: lib/ uses the
device contract (rdmx/mlx5: prm and queue) but never a backend (rdmx/dv, rdmx/emu); a backend
never includes the other one or lib/ above core; lib/rt knows only core; lib/endpoint (the
glue) may use both backends and the window layer, not the runtime. The assembly layer
(lib/capi, apps, tests, examples) is not restricted but for the applications below, which reach
a device only through the library's services (lib/endpoint: opener, sessions, rdma_cm) and never
through a driver's own header: rdmafwd neither driver's (rdmx/dv, rdmx/emu: lib/endpoint's
device facade gives it the emulated device's profiles, statistics, fault injection and shared
thread), blockd not a driver at all (the C API only). A quoted path into drivers/ counts too. Usage: check_layers.py SOURCE_ROOT
"""
import pathlib
import re
import sys

CONTRACT = ('rdmx/mlx5/',)
ALLOWED = {
    'lib/core': ('rdmx/core/',),
    'lib/mlx5/prm': ('rdmx/core/', 'rdmx/mlx5/prm/'),
    'lib/mlx5': ('rdmx/core/',) + CONTRACT,
    'drivers/mlx5/emu': ('rdmx/core/', 'rdmx/emu/') + CONTRACT,
    'drivers/mlx5/dv': ('rdmx/core/', 'rdmx/dv/') + CONTRACT,
    'lib/mem': ('rdmx/core/', 'rdmx/mem/') + CONTRACT,
    'lib/win': ('rdmx/core/', 'rdmx/mem/', 'rdmx/win/') + CONTRACT,
    'lib/rt': ('rdmx/core/', 'rdmx/rt/'),
    # The glue: opens either backend by name, connects and recovers poll cores.
    'lib/endpoint': ('rdmx/core/', 'rdmx/mem/', 'rdmx/win/', 'rdmx/endpoint/', 'rdmx/emu/',
                     'rdmx/dv/') + CONTRACT,
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](rdmx/[^>"]+)[>"]')
# Applications: the include paths they may not use.
FORBIDDEN = {
    'apps/rdmafwd': ('rdmx/dv/', 'rdmx/emu/'),
    'examples/blockd': ('rdmx/dv/', 'rdmx/emu/'),
}
DRIVER_PATH = re.compile(r'^\s*#\s*include\s*[<"]([^>"]*drivers/[^>"]+)[>"]')


def main(src):
    bad = []
    for lib, allowed in ALLOWED.items():
        for p in sorted((src / lib).rglob('*')):
            if p.suffix not in ('.h', '.hpp', '.cpp', '.c') or not p.is_file():
                continue
            for n, line in enumerate(p.read_text(errors='replace').splitlines(), 1):
                m = INCLUDE.match(line)
                if m and not m.group(1).startswith(allowed):
                    bad.append(f'{p.relative_to(src)}:{n}: <{m.group(1)}> is outside what {lib} '
                               f'may use ({", ".join(allowed)}; doc/guides/architecture.md)')
    for app, forbidden in FORBIDDEN.items():
        for p in sorted((src / app).rglob('*')):
            if p.suffix not in ('.h', '.hpp', '.cpp', '.c') or not p.is_file():
                continue
            for n, line in enumerate(p.read_text(errors='replace').splitlines(), 1):
                m, d = INCLUDE.match(line), DRIVER_PATH.match(line)
                if (m and m.group(1).startswith(forbidden)) or d:
                    bad.append(f'{p.relative_to(src)}:{n}: <{(m or d).group(1)}>: {app} reaches '
                               f'devices through lib/endpoint, not a driver header')
    for b in bad:
        print(b)
    if not bad:
        print(f'{len(ALLOWED)} libraries include only what their layer allows; '
              f'{len(FORBIDDEN)} applications include no driver header they may not')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(pathlib.Path(sys.argv[1])))
