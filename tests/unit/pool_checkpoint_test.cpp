// Checkpoints of a private pool on the host backend (Note [Pool checkpoints] in core/private_pool.h):
// what torch.compile's CUDA-graph trees do when a program takes a second path through a tree. Graph
// A is recorded, then B after it; the program then replays A and records C instead of B. Before C is
// recorded the pool must hold exactly what it held when A's recording ended.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "test_support.h"
#include "tracepool/tracepool.h"

namespace tracepool::core {
using tracepool::testing::current;
using tracepool::testing::host_allocator;
using tracepool::testing::pool_blocks;
using tracepool::testing::stats_of;

namespace {

constexpr uint64_t tree_pool = 11;
void* const graph_stream = reinterpret_cast<void*>(0x1000);
void* const side_stream = reinterpret_cast<void*>(0x2000);

// What the allocator says of each allocated block of the pool: its size and call site, by address.
struct held {
  size_t size;
  size_t requested;
  uint32_t site;
  bool operator==(const held& o) const { return size == o.size && requested == o.requested && site == o.site; }
};
std::map<uintptr_t, held> live_of(allocator& a, uint64_t pool = tree_pool) {
  std::vector<block_record> records;
  EXPECT_EQ(a.collect_blocks(0, &records), status::ok);
  std::map<uintptr_t, held> out;
  for (const block_record& r : records)
    if (r.live && r.pool == pool) out[r.address] = held{r.size, r.requested, r.site};
  return out;
}

// A recording as the graph trees make one: route, capture, end.
struct recording {
  allocator& a;
  recording(allocator& alloc) : a(alloc) {
    EXPECT_EQ(a.begin_pool(0, tree_pool, nullptr, graph_stream, nullptr), status::ok) << last_error();
    EXPECT_EQ(a.device_backend().begin_capture(0, graph_stream), status::ok) << last_error();
  }
  ~recording() {
    EXPECT_EQ(a.device_backend().end_capture(0, graph_stream), status::ok) << last_error();
    EXPECT_EQ(a.end_pool(0, tree_pool), status::ok) << last_error();
  }
};

void* alloc(allocator& a, size_t size, void* stream = graph_stream) {
  void* p = nullptr;
  EXPECT_EQ(a.malloc(size, 0, stream, &p), status::ok) << last_error();
  return p;
}

std::vector<std::pair<uint32_t, int64_t>> live_by_site(allocator& a) {
  call_site_table& sites = a.call_sites().sites();
  std::vector<std::pair<uint32_t, int64_t>> out;
  for (uint32_t id = 1; id < sites.end(); ++id)
    if (sites.ready(id) && sites.at(id).live_bytes() != 0) out.emplace_back(id, sites.at(id).live_bytes());
  return out;
}

bool overlaps(const void* a, size_t a_size, const void* b, size_t b_size) {
  const char *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
  return x < y + b_size && y < x + a_size;
}

}  // namespace

TEST(PoolCheckpoints, RestoringMakesThePoolHoldExactlyTheCheckpointsBlocks) {
  auto a = host_allocator();
  void *a_out = nullptr, *a_kept = nullptr;
  {
    recording r(*a);  // graph A: two outputs and a temporary freed inside the capture
    a_out = alloc(*a, 300 << 10);
    void* scratch = alloc(*a, 100 << 10);
    a_kept = alloc(*a, 5000);
    ASSERT_EQ(a->free(scratch), status::ok);
  }
  pool_checkpoint after_a;
  ASSERT_EQ(a->checkpoint_pool(0, tree_pool, &after_a), status::ok) << last_error();
  const auto live_after_a = live_of(*a);
  ASSERT_EQ(after_a.blocks.size(), 2u);
  void* b_out = nullptr;
  {
    recording r(*a);  // graph B follows A: its output lands in the pool beside A's
    b_out = alloc(*a, 700 << 10);
  }
  ASSERT_EQ(a->free(a_out), status::ok) << "A's first output died before the second path";
  EXPECT_EQ(pool_blocks(*a, tree_pool), (std::vector<void*>{std::min(a_kept, b_out), std::max(a_kept, b_out)}));

  std::vector<void*> freed, made;
  ASSERT_EQ(a->restore_pool(after_a, &freed, &made), status::ok) << last_error();
  std::sort(freed.begin(), freed.end());
  std::sort(made.begin(), made.end());
  EXPECT_EQ(freed, (std::vector<void*>{std::min(a_kept, b_out), std::max(a_kept, b_out)}))
      << "every block the pool had allocated is freed";
  EXPECT_EQ(made, (std::vector<void*>{std::min(a_out, a_kept), std::max(a_out, a_kept)}))
      << "every block of the checkpoint is made again, at its address";
  EXPECT_EQ(live_of(*a), live_after_a) << "same addresses, sizes, requested bytes and call sites as after A";
  EXPECT_EQ(a->validate(), status::ok) << last_error();

  // Graph C, the second path, may use B's memory but never A's outputs.
  void* c_out = nullptr;
  {
    recording r(*a);
    c_out = alloc(*a, 700 << 10);
  }
  EXPECT_EQ(c_out, b_out) << "B's memory is free again for C";
  for (void* p : made) {
    const held& h = live_after_a.at(reinterpret_cast<uintptr_t>(p));
    EXPECT_FALSE(overlaps(c_out, 700 << 10, p, h.size)) << "C overwrote a block alive after A";
  }
  EXPECT_EQ(current(stats_of(*a), stat_kind::allocation), 3) << "A's two, C's one";
  for (void* p : made) ASSERT_EQ(a->free(p), status::ok) << "the restored blocks are the caller's to free";
  ASSERT_EQ(a->free(c_out), status::ok);
  EXPECT_EQ(a->free(b_out), status::double_free) << "B's block was freed by the restore";
  EXPECT_EQ(current(stats_of(*a), stat_kind::allocation), 0);
  EXPECT_EQ(current(stats_of(*a), stat_kind::requested_bytes), 0);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
}

// The call-site counts follow: a restored block is counted at its old site again, a freed one not.
TEST(PoolCheckpoints, CallSiteCountsFollowTheRestore) {
  auto a = host_allocator();
  {
    recording r(*a);
    (void)alloc(*a, 1 << 20);
  }
  pool_checkpoint cp;
  ASSERT_EQ(a->checkpoint_pool(0, tree_pool, &cp), status::ok);
  ASSERT_EQ(cp.blocks.size(), 1u);
  ASSERT_NE(cp.blocks[0].site, 0u) << "call sites are on";
  {
    recording r(*a);
    (void)alloc(*a, 2 << 20);
  }
  const auto before = live_by_site(*a);
  std::vector<void*> freed, made;
  ASSERT_EQ(a->restore_pool(cp, &freed, &made), status::ok) << last_error();
  const auto after = live_by_site(*a);
  int64_t total_before = 0, total_after = 0, at_site = 0;
  for (const auto& [site, bytes] : before) total_before += bytes;
  for (const auto& [site, bytes] : after) {
    total_after += bytes;
    if (site == cp.blocks[0].site) at_site = bytes;
  }
  EXPECT_EQ(total_before, 3 << 20);
  EXPECT_EQ(total_after, 1 << 20) << "the second recording's block is no longer counted";
  EXPECT_EQ(at_site, 1 << 20) << "the restored block is counted at its own call site";
  for (void* p : made) ASSERT_EQ(a->free(p), status::ok);
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
}

// A block whose record_stream work is pending cannot be waited for while a capture runs (the wait
// would break it): the restore changes nothing and says why. Once no capture runs, it waits.
TEST(PoolCheckpoints, ARestoreThatCannotBeDoneChangesNothing) {
  auto a = host_allocator();
  void* out = nullptr;
  {
    recording r(*a);
    out = alloc(*a, 1 << 20);
  }
  pool_checkpoint cp;
  ASSERT_EQ(a->checkpoint_pool(0, tree_pool, &cp), status::ok);
  ASSERT_EQ(a->record_stream(out, side_stream), status::ok);
  ASSERT_EQ(a->free(out), status::ok);  // pending: the side stream's work is not known done
  void* other = nullptr;
  constexpr uint64_t other_pool = 12;
  ASSERT_EQ(a->begin_pool(0, other_pool, nullptr, side_stream, nullptr), status::ok);
  ASSERT_EQ(a->device_backend().begin_capture(0, side_stream), status::ok);
  ASSERT_EQ(a->malloc(4096, 0, side_stream, &other), status::ok);
  std::vector<void*> freed, made;
  EXPECT_EQ(a->restore_pool(cp, &freed, &made), status::invalid_argument);
  EXPECT_NE(std::string(last_error()).find("nothing was changed"), std::string::npos) << last_error();
  EXPECT_TRUE(freed.empty() && made.empty());
  EXPECT_TRUE(pool_blocks(*a, tree_pool).empty());
  EXPECT_EQ(a->free(other), status::ok);
  ASSERT_EQ(a->device_backend().end_capture(0, side_stream), status::ok);
  ASSERT_EQ(a->end_pool(0, other_pool), status::ok);
  ASSERT_EQ(a->release_pool(0, other_pool), status::ok);

  ASSERT_EQ(a->restore_pool(cp, &freed, &made), status::ok) << last_error();
  EXPECT_EQ(made, std::vector<void*>{out});
  EXPECT_EQ(pool_blocks(*a, tree_pool), std::vector<void*>{out});
  ASSERT_EQ(a->free(out), status::ok);
  EXPECT_EQ(a->validate(), status::ok) << last_error();
  EXPECT_EQ(a->release_pool(0, tree_pool), status::ok);
}

TEST(PoolCheckpoints, BadCallsAreErrors) {
  auto a = host_allocator();
  pool_checkpoint cp;
  EXPECT_EQ(a->checkpoint_pool(0, tree_pool, &cp), status::invalid_argument) << "no such pool";
  EXPECT_EQ(a->checkpoint_pool(0, 0, &cp), status::invalid_argument) << "0 is the default pool";
  EXPECT_EQ(a->checkpoint_pool(5, tree_pool, &cp), status::invalid_device);
  EXPECT_EQ(a->checkpoint_pool(0, tree_pool, nullptr), status::invalid_argument);
  ASSERT_EQ(a->retain_pool(0, tree_pool), status::ok);
  ASSERT_EQ(a->checkpoint_pool(0, tree_pool, &cp), status::ok);
  ASSERT_EQ(a->release_pool(0, tree_pool), status::ok);
  std::vector<void*> freed, made;
  EXPECT_EQ(a->restore_pool(cp, &freed, &made), status::invalid_argument) << "the pool is gone";
  EXPECT_EQ(a->restore_pool(cp, nullptr, &made), status::invalid_argument);
}

// The C API: the lists reach the caller through its functions, and a checkpoint is its instance's.
TEST(PoolCheckpoints, TheCApiTellsWhatWasFreedAndMade) {
  tracepool_t* tp = nullptr;
  tracepool_t* other = nullptr;
  ASSERT_EQ(tracepool_create("backend:host,validate:on", &tp), TRACEPOOL_OK) << tracepool_last_error();
  ASSERT_EQ(tracepool_create("backend:host", &other), TRACEPOOL_OK) << tracepool_last_error();
  ASSERT_EQ(tracepool_pool_begin(tp, 0, tree_pool, nullptr, graph_stream, nullptr), TRACEPOOL_OK);
  void *first = nullptr, *second = nullptr;
  ASSERT_EQ(tracepool_malloc(tp, 4096, 0, graph_stream, &first), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_pool_end(tp, 0, tree_pool), TRACEPOOL_OK);
  tracepool_pool_checkpoint_t* cp = nullptr;
  ASSERT_EQ(tracepool_pool_checkpoint(tp, 0, tree_pool, &cp), TRACEPOOL_OK) << tracepool_last_error();
  ASSERT_EQ(tracepool_pool_begin(tp, 0, tree_pool, nullptr, graph_stream, nullptr), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_malloc(tp, 8192, 0, graph_stream, &second), TRACEPOOL_OK);
  ASSERT_EQ(tracepool_pool_end(tp, 0, tree_pool), TRACEPOOL_OK);

  struct lists {
    std::vector<void*> freed, made;
  } seen;
  auto on_freed = [](void* c, void* p) { static_cast<lists*>(c)->freed.push_back(p); };
  auto on_made = [](void* c, void* p) { static_cast<lists*>(c)->made.push_back(p); };
  EXPECT_EQ(tracepool_pool_restore(other, cp, on_freed, on_made, &seen), TRACEPOOL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tracepool_last_error()).find("another instance"), std::string::npos);
  EXPECT_EQ(tracepool_pool_restore(tp, nullptr, on_freed, on_made, &seen), TRACEPOOL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(tracepool_pool_restore(tp, cp, on_freed, on_made, &seen), TRACEPOOL_OK) << tracepool_last_error();
  std::sort(seen.freed.begin(), seen.freed.end());
  EXPECT_EQ(seen.freed, (std::vector<void*>{std::min(first, second), std::max(first, second)}));
  EXPECT_EQ(seen.made, std::vector<void*>{first});
  EXPECT_EQ(tracepool_free(tp, second, nullptr), TRACEPOOL_ERR_DOUBLE_FREE);
  EXPECT_EQ(tracepool_free(tp, first, nullptr), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_validate(tp), TRACEPOOL_OK) << tracepool_last_error();
  tracepool_pool_checkpoint_free(cp);
  tracepool_pool_checkpoint_free(nullptr);
  EXPECT_EQ(tracepool_pool_release(tp, 0, tree_pool), TRACEPOOL_OK);
  EXPECT_EQ(tracepool_pool_release(tp, 0, tree_pool), TRACEPOOL_OK);
  tracepool_destroy(other);
  tracepool_destroy(tp);
}

}  // namespace tracepool::core
