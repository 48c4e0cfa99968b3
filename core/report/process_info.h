// process_info.h: which process a report is of, and where each rank's report goes.
//
// Note [Ranks]
// Under a launcher every rank runs the same program with the same environment but for a few
// variables, so every rank's TRACEPOOL_REPORT, `run -o` and write_report name the same file, and the
// last rank to exit wins. A report therefore records its process (pid, host) and, when a launcher
// set them, its rank, local rank and world size; and report paths take placeholders: {rank} (0
// when no launcher set one), {pid} and {host}. Under a launcher of more than one rank, a path with
// neither {rank} nor {pid} gets "-rank<N>" before its extension ("report.json" becomes
// "report-rank1.json"): the only default with which no rank's report replaces another's. Paths written
// in place are left as they are: descriptors ("stderr", /dev/stdout, /dev/fd/N, /proc/self/fd/N) and
// existing character devices and FIFOs; a file under /dev/shm is a file, and gets the rank. Each
// placeholder's value is made one plain file-name component (letters, digits, '.', '-', '_'; never "."
// or ".."), so that no host name can move a report to another folder.
// Launchers, first found wins: torchrun and most Python launchers (RANK, LOCAL_RANK, WORLD_SIZE),
// Open MPI (OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE), MPICH and Intel MPI (PMI_RANK, PMI_SIZE),
// Slurm's srun (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS). A value that is not a non-negative
// integer counts as unset.
#pragma once

#include <cstdint>
#include <string>

namespace tracepool::core {

struct process_summary {
  int64_t pid = 0;  // 0: not known (a report saved before reports named their process)
  std::string host;
  int64_t rank = -1;  // -1: no launcher set one
  int64_t local_rank = -1;
  int64_t world_size = 0;  // 0: no launcher set one
};

// This process, now (the environment is read at each call: a host may set RANK late).
process_summary this_process();

// `path` with its placeholders replaced and, under a launcher of more than one rank, the rank added
// (Note [Ranks]).
std::string expand_report_path(const std::string& path, const process_summary& p);

}  // namespace tracepool::core
