// nvml.h: what a device holds, and the processes using it, as the NVIDIA management library (NVML, libnvidia-ml.so.1,
// what nvidia-smi and nvidia-ml-py read) lists them. Report time only; loaded with dlopen on first
// use, as the driver is (ARCHITECTURE.md, decision 1), so nothing is needed to build or load tracepool.
#pragma once

#include <string>
#include <vector>

#include "backend.h"

namespace tracepool::backend {

// The compute processes NVML lists on the device whose PCI bus id is `pci_bus_id` ("0000:00:06.0",
// as cuDeviceGetPCIBusId writes it), into *out. False, with the reason in *why, when NVML cannot
// be loaded or cannot say. Never calls tracepool::fail: a report must not change the last error.
bool nvml_processes(const char* pci_bus_id, std::vector<process_usage>* out, std::string* why) noexcept;

// What the device at `pci_bus_id` has free and in all, as cuMemGetInfo counts them (memory the driver
// keeps for itself left out of the total), for a device where this process has no CUDA context (Note
// [No context as a side effect] in backend.h). False, with the reason in *why, when NVML cannot say.
bool nvml_memory(const char* pci_bus_id, size_t* free_bytes, size_t* total_bytes, std::string* why) noexcept;

}  // namespace tracepool::backend
