// cuda_driver.cpp: loading the CUDA driver and resolving its entry points (cuda_driver.h).
#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace tracepool::backend {
namespace {

// Entry points are resolved with the ABI they had in CUDA 12.0 (cuMemAlloc_v2, ...). Asking for
// CUDA_VERSION instead would silently switch a pointer's ABI when the headers are upgraded.
constexpr int kDriverApiVersion = 12000;

// CUDA_VISIBLE_DEVICES is the usual reason why a machine with GPUs shows none.
const char* visible_devices() noexcept {
  thread_local char note[160];
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible) return "CUDA_VISIBLE_DEVICES is unset";
  std::snprintf(note, sizeof note, "CUDA_VISIBLE_DEVICES=\"%s\"", visible);
  return note;
}

// Resolves entry points one by one and remembers the first one the driver lacks.
struct entry_point_resolver {
  cuGetProcAddress_v2_t* get_proc;
  const char* missing = nullptr;
  CUresult result = CUDA_SUCCESS;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;

  template <class F>
  void operator()(const char* name, F* fn) noexcept {
    if (missing) return;
    void* p = nullptr;
    // Legacy-stream variants: backend.h defines a null stream as the legacy default stream.
    result = get_proc(name, &p, kDriverApiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (result != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !p) missing = name;
    else *fn = reinterpret_cast<F>(p);
  }
};

status open_driver(cuGetProcAddress_v2_t** get_proc) noexcept {
  // RTLD_LOCAL: the host (PyTorch, CuPy) may hold the driver too; we add a handle without
  // exporting its symbols. Never dlclose'd: the driver keeps threads and atexit hooks.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    return fail(status::unavailable,
                "backend cuda: cannot load libcuda.so.1 (dlopen: %s); is the NVIDIA driver "
                "installed?", dlerror());
  }
  void* symbol = dlsym(library, "cuGetProcAddress_v2");
  if (!symbol) {
    return fail(status::unavailable, "backend cuda: libcuda.so.1 has no cuGetProcAddress_v2: the "
                "NVIDIA driver predates CUDA 12.0 and must be updated");
  }
  *get_proc = reinterpret_cast<cuGetProcAddress_v2_t*>(symbol);
  return status::ok;
}

status explain_missing(const entry_point_resolver& resolve, const driver_api& api) noexcept {
  // The toolkit's stub libcuda (for linking only) often lands on LD_LIBRARY_PATH in containers.
  if (resolve.result == CUDA_ERROR_STUB_LIBRARY) {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(resolve.get_proc), &info);
    return fail(status::unavailable, "backend cuda: %s is the CUDA toolkit's stub library, not "
                "the NVIDIA driver; is LD_LIBRARY_PATH set to a stubs directory?",
                info.dli_fname ? info.dli_fname : "libcuda.so.1");
  }
  if (resolve.result != CUDA_SUCCESS) {
    return fail(status::unavailable, "backend cuda: cuGetProcAddress(\"%s\"): %s", resolve.missing,
                describe(api, resolve.result));
  }
  bool too_old = resolve.found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  return fail(status::unavailable, "backend cuda: the driver has no %s for CUDA 12.0 (%s); update "
              "the NVIDIA driver", resolve.missing, too_old ? "too old" : "symbol not found");
}

}  // namespace

const char* describe(const driver_api& api, CUresult r) noexcept {
  thread_local char t[256];
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name) api.get_error_name(r, &name);
  if (api.get_error_string) api.get_error_string(r, &text);
  if (!name) std::snprintf(t, sizeof t, "CUresult %d", static_cast<int>(r));
  else std::snprintf(t, sizeof t, "%s (%s)", name, text ? text : "no description");
  return t;
}

status load_driver(driver_api* api) noexcept {
  entry_point_resolver resolve{};
  if (status s = open_driver(&resolve.get_proc); s != status::ok) return s;
#define TRACEPOOL_RESOLVE_ENTRY_POINT(member, symbol, type) resolve(#symbol, &api->member);
  TRACEPOOL_CUDA_ENTRY_POINTS(TRACEPOOL_RESOLVE_ENTRY_POINT)
#undef TRACEPOOL_RESOLVE_ENTRY_POINT
  return resolve.missing ? explain_missing(resolve, *api) : status::ok;
}

status init_driver(const driver_api& api, int* count) noexcept {
  if (CUresult r = api.init(0); r != CUDA_SUCCESS) {
    return fail(status::unavailable, "backend cuda: cuInit failed: %s; %s",
                describe(api, r), visible_devices());
  }
  if (CUresult r = api.device_get_count(count); r != CUDA_SUCCESS) {
    return fail(status::unavailable, "backend cuda: cuDeviceGetCount: %s", describe(api, r));
  }
  if (*count <= 0) {
    return fail(status::unavailable, "backend cuda: the driver reports 0 devices; %s",
                visible_devices());
  }
  return status::ok;
}

}  // namespace tracepool::backend
