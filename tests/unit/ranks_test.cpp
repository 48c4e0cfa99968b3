// Reports under a launcher (Note [Ranks] in core/report/process_info.h): a report names its process
// and rank, every rank's report goes to a file of its own, and report paths take {rank}, {pid} and
// {host}. ctest runs each test in a process of its own, so the environment set here stays here.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "report/report.h"
#include "report_support.h"
#include "tracepool/tracepool.h"

namespace {

namespace core = tracepool::core;
using tracepool::testing::HostInstanceTest;
using tracepool::testing::parse_report;

constexpr const char* launcher_variables[] = {"RANK",         "LOCAL_RANK",   "WORLD_SIZE",   "OMPI_COMM_WORLD_RANK",
                                              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                              "PMI_SIZE",     "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"};

// No launcher's variables, then the given ones.
void launched_as(std::initializer_list<std::pair<const char*, const char*>> vars) {
  for (const char* v : launcher_variables) ::unsetenv(v);
  for (const auto& [name, value] : vars) ::setenv(name, value, 1);
}

core::process_summary rank_of(int64_t rank, int64_t world) {
  core::process_summary p;
  p.pid = 4242;
  p.host = "node/7";
  p.rank = rank;
  p.world_size = world;
  return p;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

TEST(Ranks, PlaceholdersAreReplaced) {
  EXPECT_EQ(core::expand_report_path("r-{rank}-{pid}-{host}.json", rank_of(3, 4)), "r-3-4242-node_7.json");
  EXPECT_EQ(core::expand_report_path("{rank}/{rank}.txt", rank_of(1, 2)), "1/1.txt");
  // Without a launcher, {rank} is 0 and nothing is added.
  EXPECT_EQ(core::expand_report_path("r{rank}.json", rank_of(-1, 0)), "r0.json");
  EXPECT_EQ(core::expand_report_path("report.json", rank_of(-1, 0)), "report.json");
  EXPECT_EQ(core::expand_report_path("report.json", rank_of(0, 1)), "report.json");  // one rank: its path
  EXPECT_EQ(core::expand_report_path("{other}.json", rank_of(-1, 0)), "{other}.json");
}

TEST(Ranks, SeveralRanksGetAFileEachByDefault) {
  const core::process_summary p = rank_of(3, 8);
  EXPECT_EQ(core::expand_report_path("out/report.json", p), "out/report-rank3.json");
  EXPECT_EQ(core::expand_report_path("report", p), "report-rank3");
  EXPECT_EQ(core::expand_report_path("v1.2/report", p), "v1.2/report-rank3");
  EXPECT_EQ(core::expand_report_path(".report", p), ".report-rank3");
  EXPECT_EQ(core::expand_report_path("r.{host}.json", p), "r.node_7-rank3.json");
  // A path that places the rank or the pid itself is left as placed; descriptors and devices alone.
  EXPECT_EQ(core::expand_report_path("r-{pid}.json", p), "r-4242.json");
  EXPECT_EQ(core::expand_report_path("stderr", p), "stderr");
  EXPECT_EQ(core::expand_report_path("/dev/stderr", p), "/dev/stderr");
  EXPECT_EQ(core::expand_report_path("/proc/self/fd/2", p), "/proc/self/fd/2");
}

// Only what is written in place gets no rank: descriptors, and existing character devices and FIFOs. A
// file under /dev/shm is a file (four ranks once left one report there).
TEST(Ranks, FilesUnderDevAreFilesAndGetTheRankToo) {
  const core::process_summary p = rank_of(2, 4);
  const std::string shm = "/dev/shm/tracepool_ranks_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(shm.c_str(), 0700), 0);
  EXPECT_EQ(core::expand_report_path(shm + "/report.json", p), shm + "/report-rank2.json");
  EXPECT_EQ(core::expand_report_path("/dev/not-there.json", p), "/dev/not-there-rank2.json");
  EXPECT_EQ(core::expand_report_path("/dev/null", p), "/dev/null");
  EXPECT_EQ(core::expand_report_path("/dev/fd/3", p), "/dev/fd/3");
  EXPECT_EQ(core::expand_report_path("/dev/stdout", p), "/dev/stdout");
  const std::string fifo = shm + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(core::expand_report_path(fifo, p), fifo);
  ::unlink(fifo.c_str());
  ::rmdir(shm.c_str());
}

// A placeholder's value is one plain file-name component, whatever the host is called: a host name of
// ".." must not write the report into the parent folder.
TEST(Ranks, PlaceholdersBecomePlainFileNameComponents) {
  core::process_summary p = rank_of(-1, 0);
  for (const char* host : {"..", ".", "", "../../etc", "a/../b", "tab\tx", "nl\nx"}) {
    p.host = host;
    const std::string out = core::expand_report_path("reports/{host}/r.json", p);
    const std::string part = out.substr(8, out.size() - 8 - 7);  // between "reports/" and "/r.json"
    EXPECT_EQ(out.rfind("reports/", 0), 0u) << out;
    EXPECT_EQ(part.find('/'), std::string::npos) << out;
    EXPECT_NE(part, "..") << out;
    EXPECT_NE(part, ".") << out;
    EXPECT_FALSE(part.empty()) << out;
    for (char c : part) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') << out;
  }
  p.host = "node-7.cluster";
  EXPECT_EQ(core::expand_report_path("{host}.json", p), "node-7.cluster.json");  // an ordinary name stays
}

TEST(Ranks, LaunchersAreReadFromTheEnvironment) {
  launched_as({});
  core::process_summary p = core::this_process();
  EXPECT_EQ(p.pid, static_cast<int64_t>(::getpid()));
  EXPECT_FALSE(p.host.empty());
  EXPECT_EQ(p.rank, -1);
  EXPECT_EQ(p.world_size, 0);

  launched_as({{"RANK", "2"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "4"}});  // torchrun
  p = core::this_process();
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.local_rank, 0);
  EXPECT_EQ(p.world_size, 4);

  launched_as({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "6"}});
  p = core::this_process();
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.world_size, 6);

  launched_as({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(core::this_process().rank, 7);

  // Values that are not counts are no rank: the next launcher's, or none.
  launched_as({{"RANK", "two"}, {"WORLD_SIZE", "4"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  p = core::this_process();
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.world_size, 3);
  launched_as({{"RANK", "-1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(core::this_process().rank, -1);
  launched_as({{"RANK", "1x"}});
  EXPECT_EQ(core::this_process().rank, -1);
}

using RanksOnHost = HostInstanceTest;

TEST_F(RanksOnHost, EachRanksReportNamesItsRankAndGoesToItsOwnFile) {
  void* p = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 1000, 0, nullptr, &p), TRACEPOOL_OK);
  for (const char* rank : {"0", "1"}) {
    launched_as({{"RANK", rank}, {"LOCAL_RANK", rank}, {"WORLD_SIZE", "2"}});
    ASSERT_EQ(tracepool_write_report(tp, (dir + "/report.json").c_str(), nullptr), TRACEPOOL_OK)
        << tracepool_last_error();
  }
  EXPECT_FALSE(exists(dir + "/report.json"));
  for (int rank : {0, 1}) {
    const auto r = parse_report(dir + "/report-rank" + std::to_string(rank) + ".json");
    EXPECT_EQ(r["process"]["rank"], rank);
    EXPECT_EQ(r["process"]["local_rank"], rank);
    EXPECT_EQ(r["process"]["world_size"], 2);
    EXPECT_EQ(r["process"]["pid"], static_cast<int64_t>(::getpid()));
  }
  // The C API says where a report goes before it is written.
  char* where = nullptr;
  ASSERT_EQ(tracepool_report_path("x/{host}.json", &where), TRACEPOOL_OK);
  EXPECT_EQ(std::string(where), "x/" + core::this_process().host + "-rank1.json");
  tracepool_string_free(where);
  EXPECT_EQ(tracepool_report_path(nullptr, &where), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tracepool_report_path("x", nullptr), TRACEPOOL_ERR_INVALID_ARGUMENT);

  // Without a launcher: no rank in the report, and the path as given.
  launched_as({});
  ASSERT_EQ(tracepool_write_report(tp, (dir + "/report.json").c_str(), nullptr), TRACEPOOL_OK);
  const auto alone = parse_report(dir + "/report.json");
  EXPECT_TRUE(alone["process"]["rank"].is_null());
  EXPECT_TRUE(alone["process"]["world_size"].is_null());
  ASSERT_EQ(tracepool_free(tp, p, nullptr), TRACEPOOL_OK);
}

TEST(Ranks, ASavedReportKeepsItsProcessAndItsTextSaysTheRank) {
  core::report r;
  r.reason = "exit";
  r.backend = "host";
  r.capture = "off";
  r.process = rank_of(1, 2);
  r.process.local_rank = 1;
  core::report back;
  ASSERT_EQ(core::read_report_json(core::to_json(r), &back), tracepool::status::ok) << tracepool::last_error();
  EXPECT_EQ(back.process.pid, 4242);
  EXPECT_EQ(back.process.host, "node/7");
  EXPECT_EQ(back.process.rank, 1);
  EXPECT_EQ(back.process.local_rank, 1);
  EXPECT_EQ(back.process.world_size, 2);
  EXPECT_NE(core::to_text(back).find("rank 1 of 2 (local rank 1), pid 4242 on node/7\n"), std::string::npos)
      << core::to_text(back);
  // A report from before Note [Ranks] has no "process": read as no rank; a bad one is refused.
  std::string old = core::to_json(r);
  const size_t at = old.find("\"process\"");
  old.erase(at, old.find('}', at) + 2 - at);
  ASSERT_EQ(core::read_report_json(old, &back), tracepool::status::ok) << old;
  EXPECT_EQ(back.process.rank, -1);
  EXPECT_EQ(core::to_text(back).find("rank "), std::string::npos);
  std::string bad = core::to_json(r);
  const size_t rank_at = bad.find("\"rank\":");
  ASSERT_NE(rank_at, std::string::npos) << bad;
  bad.insert(bad.find_first_of("0123456789", rank_at), "-");
  EXPECT_EQ(core::read_report_json(bad, &back, "r.json"), tracepool::status::invalid_argument);
  EXPECT_NE(std::string(tracepool::last_error()).find("process.rank"), std::string::npos) << tracepool::last_error();
}

}  // namespace
