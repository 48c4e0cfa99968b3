// nvml.cpp: see nvml.h. The few NVML declarations used are written out here from NVML's API
// reference (the toolkit does not always ship nvml.h). The process list is read through
// nvmlDeviceGetComputeRunningProcesses_v2, whose entries have kept one 24-byte layout
// (nvmlProcessInfo_v2_t) since driver 470: drivers 535.43 to 535.86 changed _v3's entries to 32
// bytes without renaming it (nvitop PR #79, go-nvml issue #75). The buffer has room for 32-byte
// entries anyway, so that no driver can write past it. NVML is initialised once and never shut
// down, as the driver is never unloaded: others in the process (nvidia-ml-py, PyTorch) may use it
// too, and nvmlInit/nvmlShutdown count their calls.
#include "nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace tracepool::backend {
namespace {

using nvml_return = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using nvml_device = void*;
constexpr nvml_return kSuccess = 0;
constexpr nvml_return kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
constexpr unsigned long long kNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

struct nvml_process_info {  // nvmlProcessInfo_v2_t: the entries of the _v2 entry point
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(nvml_process_info) == 24, "nvmlProcessInfo_v2_t is 24 bytes");
constexpr size_t kRoomPerEntry = 32;  // the largest entry any driver has written (535.43's _v3)

struct nvml_memory_v1 {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct nvml_memory_v2 {  // nvmlMemory_v2_t (drivers 510 on): the driver's reserved memory apart
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size, and its version in the top byte.
constexpr unsigned int kMemoryV2 = static_cast<unsigned int>(sizeof(nvml_memory_v2)) | (2u << 24);

struct nvml_api {
  nvml_return (*init)() = nullptr;                                         // nvmlInit_v2
  const char* (*error_string)(nvml_return) = nullptr;                      // nvmlErrorString
  nvml_return (*device_by_bus_id)(const char*, nvml_device*) = nullptr;    // nvmlDeviceGetHandleByPciBusId_v2
  nvml_return (*compute_processes)(nvml_device, unsigned int*, nvml_process_info*) = nullptr;
  nvml_return (*memory_v1)(nvml_device, nvml_memory_v1*) = nullptr;  // nvmlDeviceGetMemoryInfo
  nvml_return (*memory_v2)(nvml_device, nvml_memory_v2*) = nullptr;  // nvmlDeviceGetMemoryInfo_v2, if any
  std::string problem;  // why NVML cannot be used; empty when it can
};

template <class F>
bool resolve(void* library, const char* symbol, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(library, symbol));
  return *fn != nullptr;
}

nvml_api load() {
  nvml_api api;
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);  // never dlclose'd
  if (library == nullptr) {
    api.problem = std::string("cannot load libnvidia-ml.so.1 (") + dlerror() + ")";
    return api;
  }
  if (!resolve(library, "nvmlInit_v2", &api.init) || !resolve(library, "nvmlErrorString", &api.error_string) ||
      !resolve(library, "nvmlDeviceGetHandleByPciBusId_v2", &api.device_by_bus_id) ||
      !resolve(library, "nvmlDeviceGetComputeRunningProcesses_v2", &api.compute_processes)) {
    api.problem = "libnvidia-ml.so.1 lacks an entry point tracepool needs: the driver is too old";
    return api;
  }
  // Optional: a driver without them still lists processes.
  resolve(library, "nvmlDeviceGetMemoryInfo", &api.memory_v1);
  resolve(library, "nvmlDeviceGetMemoryInfo_v2", &api.memory_v2);
  if (nvml_return r = api.init(); r != kSuccess) api.problem = std::string("nvmlInit: ") + api.error_string(r);
  return api;
}

const nvml_api& api() {
  static const nvml_api loaded = load();  // once, thread-safe
  return loaded;
}

// The NVML handle of the device at `pci_bus_id`, or nullptr with the reason in *why.
nvml_device device_at(const nvml_api& nvml, const char* pci_bus_id, std::string* why) {
  if (!nvml.problem.empty()) {
    *why = nvml.problem;
    return nullptr;
  }
  nvml_device device = nullptr;
  if (nvml_return r = nvml.device_by_bus_id(pci_bus_id, &device); r != kSuccess) {
    *why = std::string("NVML has no device at PCI bus id ") + pci_bus_id + ": " + nvml.error_string(r);
    return nullptr;
  }
  return device;
}

}  // namespace

bool nvml_memory(const char* pci_bus_id, size_t* free_bytes, size_t* total_bytes, std::string* why) noexcept {
  try {
    const nvml_api& nvml = api();
    const nvml_device device = device_at(nvml, pci_bus_id, why);
    if (device == nullptr) return false;
    nvml_memory_v2 v2{};
    v2.version = kMemoryV2;
    if (nvml.memory_v2 != nullptr && nvml.memory_v2(device, &v2) == kSuccess && v2.reserved <= v2.total &&
        v2.free <= v2.total - v2.reserved) {
      *total_bytes = static_cast<size_t>(v2.total - v2.reserved);
      *free_bytes = static_cast<size_t>(v2.free);
      return true;
    }
    nvml_memory_v1 v1{};
    if (nvml.memory_v1 == nullptr) {
      *why = "libnvidia-ml.so.1 has no nvmlDeviceGetMemoryInfo";
      return false;
    }
    if (nvml_return r = nvml.memory_v1(device, &v1); r != kSuccess || v1.free > v1.total) {
      *why = std::string("nvmlDeviceGetMemoryInfo: ") + (r != kSuccess ? nvml.error_string(r) : "free > total");
      return false;
    }
    *total_bytes = static_cast<size_t>(v1.total);
    *free_bytes = static_cast<size_t>(v1.free);
    return true;
  } catch (...) {  // out of host memory
    return false;
  }
}

bool nvml_processes(const char* pci_bus_id, std::vector<process_usage>* out, std::string* why) noexcept {
  try {
    const nvml_api& nvml = api();
    const nvml_device device = device_at(nvml, pci_bus_id, why);
    if (device == nullptr) return false;
    // The list may grow between the call that sizes it and the one that fills it: a few tries.
    unsigned int room = 8;
    for (int attempt = 0; attempt < 4; ++attempt) {
      // `room` entries, each with kRoomPerEntry bytes of space; read as 24-byte entries.
      std::vector<nvml_process_info> listed((room * kRoomPerEntry + sizeof(nvml_process_info) - 1) /
                                            sizeof(nvml_process_info));
      unsigned int count = room;
      nvml_return r = nvml.compute_processes(device, &count, listed.data());
      if (r == kInsufficientSize) {
        room = count + 8;
        continue;
      }
      if (r != kSuccess) {
        *why = std::string("nvmlDeviceGetComputeRunningProcesses_v2: ") + nvml.error_string(r);
        return false;
      }
      for (unsigned int i = 0; i < count && i < room; ++i) {
        const unsigned long long used = listed[i].used_gpu_memory;
        out->push_back({static_cast<int64_t>(listed[i].pid), used == kNotAvailable ? -1 : static_cast<int64_t>(used)});
      }
      return true;
    }
    *why = "the process list kept growing while NVML was read";
    return false;
  } catch (...) {  // out of host memory: no list
    return false;
  }
}

}  // namespace tracepool::backend
