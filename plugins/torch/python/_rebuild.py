"""The command that builds tracepool against the torch of this Python, for install()'s warning when there
is no libtracepool_torch.so to use (a binary wheel, or one built against another torch).

tracepool is on no package index: it is built from its source tree. pip records where a package came from
(PEP 610's direct_url.json); where that is a folder holding tracepool's pyproject.toml still, the command
names it, and otherwise it names a clone of the source. --no-build-isolation lets the build import torch
(plugins/torch/CMakeLists.txt builds the library only where `import torch` works), so the build's own
requirements are installed first.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse

_BUILD_REQUIREMENTS = '"scikit-build-core>=0.10" "pybind11>=2.12"'  # pyproject.toml's build-system.requires
_CLONE = "PATH/TO/tracepool"  # where the source tree is not known


def _direct_url() -> str | None:
    """The text of tracepool's direct_url.json, or None (installed by something other than pip)."""
    try:
        return metadata.distribution("tracepool").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None


def source_tree() -> str | None:
    """The folder tracepool was installed from, where it holds tracepool's source still; else None (a wheel,
    a folder since removed)."""
    try:
        url = urlparse(json.loads(_direct_url() or "{}").get("url") or "")
    except (ValueError, AttributeError):
        return None
    path = unquote(url.path) if url.scheme == "file" else ""
    if not path or not os.path.isfile(os.path.join(path, "pyproject.toml")):
        return None
    if not os.path.isfile(os.path.join(path, "plugins", "torch", "torch_allocator.cpp")):
        return None  # a folder of something else since
    return path


def command() -> str:
    """One shell line that rebuilds and reinstalls tracepool, libtracepool_torch.so included, for this Python
    and its torch."""
    python = shlex.quote(sys.executable)
    found = source_tree()
    source = shlex.quote(found) if found else _CLONE
    line = "%s -m pip install %s && %s -m pip install --no-build-isolation --no-deps %s" % (
        python, _BUILD_REQUIREMENTS, python, source)
    if found is None:
        line += " (%s: a clone of tracepool's source tree)" % _CLONE
    return line
