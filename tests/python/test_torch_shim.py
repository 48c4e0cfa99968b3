"""Which PyTorch allocator tracepool.torch.install() uses, decided without PyTorch: its own allocator
class (libtracepool_torch.so, built against one torch) only under the torch it was built against;
otherwise PyTorch's CUDAPluggableAllocator, with a warning that says what is then missing and how to
get it (a binary wheel has no such library)."""

import tracepool.torch as tracepool_torch


def test_without_the_library_install_says_what_is_missing_and_how_to_get_it(monkeypatch):
    monkeypatch.setattr(tracepool_torch._torch_lib, "FILE", None)
    path, why = tracepool_torch._shim_for("2.11.0+cu130")
    assert path is None
    for words in ("no libtracepool_torch.so", "CUDAPluggableAllocator", "CUDA graphs", "torch.cuda.MemPool",
                  "torch.cuda.OutOfMemoryError", "pip install --no-build-isolation --no-binary tracepool tracepool"):
        assert words in why, why


def test_a_library_built_for_another_torch_is_left_alone(monkeypatch):
    monkeypatch.setattr(tracepool_torch._torch_lib, "FILE", "libtracepool_torch.so")
    monkeypatch.setattr(tracepool_torch._torch_lib, "TORCH_VERSION", "2.10.0+cu128")
    path, why = tracepool_torch._shim_for("2.11.0+cu130")
    assert path is None and "built against torch 2.10.0+cu128, not this torch 2.11.0+cu130" in why, why
    path, why = tracepool_torch._shim_for("2.10.0+cu128")
    assert why is None and path.endswith("/tracepool/torch/libtracepool_torch.so"), path
