// device_memory.cpp: a device's used bytes, as the driver counts them, split into tracepool's and the
// rest, and by process (report.h).
#include <algorithm>
#include <cstdint>

#include "report/report.h"

namespace tracepool::core {

// Note [Where the memory went]
// nvidia-smi shows what the driver counts used on a device, which is more than any allocator's
// figures: tracepool's reserved bytes (live, cached, private pools) are one part; the rest is this
// process's CUDA context (a few hundred MiB), what libraries allocate without the allocator (cuBLAS and
// cuDNN workspaces, NCCL's buffers, cudaMalloc calls of extensions), and other processes on the device.
// A report asks the driver (cuMemGetInfo: total - free, what torch.cuda.mem_get_info gives) when it is
// made, and splits that used figure into tracepool's reserved bytes and the rest, so that "why does
// nvidia-smi show 5 GB more than PyTorch says" has a line. nvidia-smi's own "used" may differ from the
// driver's by memory the driver keeps for itself, which newer drivers list apart as "reserved".
// Then by process: NVML (core/backend/nvml.h) lists each process's bytes, as nvidia-smi's process table
// does, so the rest splits into this process's context and libraries (its figure less tracepool's
// reserved bytes), other processes (by pid), and what no process is charged with (the driver's own;
// 9 MiB on the H200 of 2026-11-25, where this process's figure was its 1 GiB tensor and 518 MiB more).
// A process in another PID namespace (a container's) is listed under a pid it does not know as its
// own: the report then says that this process is not in the list, and names the pids it holds.
int64_t outside_bytes(const device_summary& d) {
  const int64_t reserved = d.stats.table.at(stat_kind::reserved_bytes, all_pools).current;
  return d.used_bytes > reserved ? d.used_bytes - reserved : 0;
}

process_split split_by_process(const device_summary& d, int64_t pid) {
  // Saturating: a saved report's figures are each at most total_bytes (the reader checks), not their sum.
  const auto add = [](int64_t* sum, int64_t n) { *sum = n > INT64_MAX - *sum ? INT64_MAX : *sum + n; };
  process_split split;
  int64_t listed = 0;
  for (const backend::process_usage& p : d.processes) {
    const bool known = p.used_bytes >= 0;
    const int64_t used = known ? p.used_bytes : 0;
    add(&listed, used);
    split.unknown += known ? 0 : 1;
    if (p.pid == pid) {  // listed twice (two entries of one process): one figure, their sum
      split.self_known = split.self_known || known;
      split.self_listed = true;
      add(&split.self_bytes, used);
    } else {
      ++split.others;
      add(&split.others_bytes, used);
    }
  }
  split.unlisted_bytes = std::max<int64_t>(d.used_bytes - listed, 0);
  return split;
}

}  // namespace tracepool::core
