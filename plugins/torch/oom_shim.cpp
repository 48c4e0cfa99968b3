// oom_shim.cpp: libtracepool_torch.so, the allocation entry point PyTorch calls when the Python
// package installs tracepool (tracepool.torch.install), for one reason: an allocation that does not
// fit must surface as torch.cuda.OutOfMemoryError. PyTorch's CUDAPluggableAllocator turns a NULL
// from the plugin into a null tensor without a word, and any C++ exception other than
// c10::OutOfMemoryError into a generic RuntimeError (notes/pytorch.md §1.1); throwing that type
// needs torch's headers and C++ ABI, which libtracepool.so must not depend on. So this file is
// built only where torch can be imported at build time (plugins/torch/CMakeLists.txt).
//
// Note [Exceptions out of an extern "C" function]
// Everywhere else an exception never crosses tracepool's C ABI (STYLE.md, habit 5). This function
// is the one exception: it is never called from C. Its only caller is PyTorch's C++ code, through
// the std::function CUDAPluggableAllocator::malloc holds, before that takes any lock; PyTorch
// catches c10::Error there and its Python bindings turn c10::OutOfMemoryError into
// torch.OutOfMemoryError. The shim is compiled as C++ with unwind tables, so the throw unwinds
// through this frame like any C++ frame; extern "C" only fixes the symbol's name for ctypes.
//
// Frees go straight to tracepool_torch_free in libtracepool.so (dlsym on this library's handle
// finds it among its dependencies), and that, like libtracepool's other entry points, never throws.
#include <c10/util/Exception.h>

#include "tracepool/tracepool.h"

extern "C" __attribute__((visibility("default"))) void* tracepool_torch_alloc_checked(size_t size, int device,
                                                                                      void* stream) {
  if (size == 0) return nullptr;  // PyTorch's own allocator makes no allocation for 0 bytes either
  tracepool_t* tp = tracepool_default();
  TORCH_CHECK(tp != nullptr, "tracepool: the default instance could not be created: ", tracepool_last_error());
  void* ptr = nullptr;
  const int rc = tracepool_malloc(tp, size, device, stream, &ptr);
  if (rc == TRACEPOOL_OK) return ptr;
  // The message already names the request, the largest free block, the cached bytes and the three
  // call sites holding the most memory.
  TORCH_CHECK_WITH(OutOfMemoryError, rc != TRACEPOOL_ERR_OOM, tracepool_last_error());
  TORCH_CHECK(false, "tracepool: ", tracepool_status_string(rc), ": ", tracepool_last_error());
}

namespace {
// This library's frame is the top of every stack it allocates for: as bindings, it is dropped from
// call sites like libtracepool.so's own frames. Runs when PyTorch loads the library, after
// libtracepool.so (a dependency) is initialised.
const int registered_as_bindings =
    tracepool_add_bindings_module(reinterpret_cast<const void*>(&tracepool_torch_alloc_checked));
}  // namespace
