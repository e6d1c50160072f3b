"""Plug-ins: where every registry finds its entries, built-in and the user's own.

One pattern for losses, advantage estimators and tasks: a decorated class (or function) in one file, which
registers itself under its name when its module is imported. A registry's accessor (`losses()`,
`estimators()`, `tasks()`) calls `load(package)`: it imports every module of its built-in package (a
package scan, so adding one is adding a file) and then each module named in the environment variable
`TWINKLE_EXP_PLUGINS` (comma-separated, importable from `sys.path`), once. A user's module may register
plug-ins of several kinds. This module imports nothing of twinkle_exp and nothing but the standard library.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

ENV_VAR = "TWINKLE_EXP_PLUGINS"
# The losses' own variable from before every plug-in kind shared one; still read, with the same meaning.
OLDER_ENV_VARS = ("TWINKLE_EXP_LOSSES",)

_loaded: set[str] = set()  # the modules `load` imported


def user_modules() -> list[str]:
    """The modules the user names, in order: TWINKLE_EXP_PLUGINS's, then the older variable's."""
    names = []
    for var in (ENV_VAR, *OLDER_ENV_VARS):
        names += [
            m.strip() for m in os.environ.get(var, "").split(",") if m.strip() and m.strip() not in names
        ]
    return names


def _variable_naming(module: str) -> str:
    return next(
        (v for v in (ENV_VAR, *OLDER_ENV_VARS) if module in os.environ.get(v, "").split(",")), ENV_VAR
    )


def scan(package: str) -> None:
    """Import every module of the built-in `package` (each once)."""
    root = importlib.import_module(package)
    for module in sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(root.__path__)):
        if module not in _loaded:
            importlib.import_module(module)
            _loaded.add(module)


def load(package: str) -> None:
    """Import every module of the built-in `package`, then the user's modules (each once)."""
    scan(package)
    for module in user_modules():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(
                f"{_variable_naming(module)}: cannot import plug-in module {module!r} ({exc})"
            ) from exc
        _loaded.add(module)
