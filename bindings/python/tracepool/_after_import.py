"""Runs a function right after a module is first imported: `python -m tracepool run` installs tracepool
into CuPy and Numba this way, so that a program that never imports them never pays for importing them."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from typing import Callable


class _Loader(importlib.abc.Loader):
    """The module's own loader, then `then(module)`; every other loader API is the real loader's, and
    the module keeps the real loader once it has run (importlib.resources, pkgutil.get_data)."""

    def __init__(self, loader, then):
        self._loader, self._then = loader, then

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._then(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of `name` the first time it is actually loaded; a find_spec that loads nothing
    (`if importlib.util.find_spec("cupy"):`) leaves the finder in place for the import that follows."""

    def __init__(self, name, then):
        self._name, self._then = name, then
        self._searching = threading.local()  # this finder's own search below must not find itself

    def find_spec(self, fullname, path, target=None):
        if fullname != self._name or getattr(self._searching, "on", False) or fullname in sys.modules:
            return None
        self._searching.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching.on = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self._done)
        return spec

    def _done(self, module):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self._then(module)


def after_import(name: str, then: Callable[[object], None]) -> None:
    """then(module) right after `name` is imported (now, if it is imported already). `then` must not
    raise: the import would fail with it."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _Finder(name, then))
