"""Which PyTorch allocator tracepool.torch.install() uses, decided without PyTorch: its own allocator
class (libtracepool_torch.so, built against one torch) only under the torch it was built against;
otherwise PyTorch's CUDAPluggableAllocator, with a warning that says what is then missing and how to
get it (a binary wheel has no such library)."""

import json
import shlex
import sys
from pathlib import Path

import pytest

import tracepool.torch as tracepool_torch
from tracepool.torch import _rebuild as rebuild


def test_without_the_library_install_says_what_is_missing_and_how_to_get_it(monkeypatch):
    monkeypatch.setattr(tracepool_torch._torch_lib, "FILE", None)
    path, why = tracepool_torch._shim_for("2.11.0+cu130")
    assert path is None
    for words in ("no libtracepool_torch.so", "CUDAPluggableAllocator", "CUDA graphs", "torch.cuda.MemPool",
                  "torch.cuda.OutOfMemoryError", tracepool_torch._rebuild.command()):
        assert words in why, why


def test_the_rebuild_command_builds_from_the_source_tree_pip_installed_from(monkeypatch, tmp_path):
    """tracepool is on no package index: the command builds the folder it was installed from, with the build's
    requirements first (--no-build-isolation, so that the build sees torch)."""
    source = tmp_path / "my tracepool"
    (source / "plugins" / "torch").mkdir(parents=True)
    (source / "pyproject.toml").write_text("[project]\nname = 'tracepool'\n")
    (source / "plugins" / "torch" / "torch_allocator.cpp").write_text("")
    monkeypatch.setattr(rebuild, "_direct_url", lambda: json.dumps({"url": source.as_uri(), "dir_info": {}}))
    line = rebuild.command()
    python = shlex.quote(sys.executable)
    assert line == ("%s -m pip install \"scikit-build-core>=0.10\" \"pybind11>=2.12\" && %s -m pip install "
                    "--no-build-isolation --no-deps %s" % (python, python, shlex.quote(str(source)))), line
    assert shlex.split(line)[-1] == str(source)


@pytest.mark.parametrize("installed_from", [
    None,  # not installed by pip
    {"url": "file:///tmp/wheels/tracepool-0.1.0-cp311-cp311-manylinux_2_26_x86_64.whl", "archive_info": {}},
    {"url": "file:///no/such/folder", "dir_info": {}},
])
def test_without_a_source_tree_the_rebuild_command_names_a_clone_and_no_package_index(monkeypatch, installed_from):
    monkeypatch.setattr(rebuild, "_direct_url", lambda: installed_from and json.dumps(installed_from))
    line = rebuild.command()
    assert "--no-build-isolation --no-deps PATH/TO/tracepool " in line, line
    assert "(PATH/TO/tracepool: a clone of tracepool's source tree)" in line, line
    assert "--no-binary" not in line and " tracepool tracepool" not in line, line


def test_pips_record_of_this_install_reads_as_a_source_tree_or_none():
    """Whatever installed the tracepool under test (pip from the checkout, or the binary wheel), the lookup
    answers without raising, and a folder it names is tracepool's."""
    found = rebuild.source_tree()
    assert found is None or (Path(found) / "plugins" / "torch" / "torch_allocator.cpp").is_file(), found


def test_a_library_built_for_another_torch_is_left_alone(monkeypatch):
    monkeypatch.setattr(tracepool_torch._torch_lib, "FILE", "libtracepool_torch.so")
    monkeypatch.setattr(tracepool_torch._torch_lib, "TORCH_VERSION", "2.10.0+cu128")
    path, why = tracepool_torch._shim_for("2.11.0+cu130")
    assert path is None and "built against torch 2.10.0+cu128, not this torch 2.11.0+cu130" in why, why
    path, why = tracepool_torch._shim_for("2.10.0+cu128")
    assert why is None and path.endswith("/tracepool/torch/libtracepool_torch.so"), path
