"""Runs a function right after a module is first imported: `python -m tracepool run` installs tracepool
into CuPy this way, so that a program that never imports CuPy never pays for importing it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _Loader(importlib.abc.Loader):
    """The module's own loader, then `then(module)`."""

    def __init__(self, loader, then):
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._then(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name, then):
        self._name, self._then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)  # once, and the search below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._then)
        return spec


def after_import(name: str, then: Callable[[object], None]) -> None:
    """then(module) right after `name` is imported (now, if it is imported already)."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _Finder(name, then))
