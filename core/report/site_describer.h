// site_describer.h: the second step of every report and export (collect -> describe -> group): the
// frames and tags of call sites as a reader sees them, every native address symbolized once per
// report, script frames spliced in where the interpreter ran them.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "trace/call_site_table.h"
#include "trace/script_frames.h"
#include "trace/symbolizer.h"
#include "trace/tags.h"

namespace tracepool::core {

// Frames and tags of the sites a report names, symbolized together (each address once).
struct described_site {
  std::vector<std::string> tags;
  std::vector<frame_info> frames;  // innermost first, tracepool's own removed
};

class site_describer {
 public:
  explicit site_describer(call_site_table& sites) : sites_(sites) {}

  // want() every site first, then resolve() once, then read them with of() or describe().
  void want(uint32_t site) {
    if (!sites_.ready(site)) return;
    const site_record& r = sites_.at(site);
    for (uint32_t i = 0; i < r.depth; ++i) addresses_.emplace(r.frames[i], frame_info{});
  }
  void resolve() {
    std::vector<uintptr_t> all;
    all.reserve(addresses_.size());
    for (auto& [pc, info] : addresses_) all.push_back(pc);
    const std::vector<frame_info> resolved = symbolize(all);
    for (size_t i = 0; i < all.size(); ++i) addresses_[all[i]] = resolved[i];
  }
  // Native frames with the interpreter's spliced in where the interpreter loop ran them (memray's
  // hybrid stacks): a native frame in the loop stands for the script frames up to the next
  // entry frame. Script frames left over (native capture off, or cut at capture_depth before
  // reaching the loop) follow the native ones: they are the outer callers.
  // A site described once and kept: for writers that name the same site many times.
  const described_site& of(uint32_t site) {
    auto [it, is_new] = described_.try_emplace(site);
    if (is_new) describe(site, &it->second.tags, &it->second.frames);
    return it->second;
  }
  void describe(uint32_t site, std::vector<std::string>* tags, std::vector<frame_info>* frames) {
    if (!sites_.ready(site)) return;
    const site_record& r = sites_.at(site);
    *tags = tag_labels(r.tags);
    const script_frame* script = r.script.load(std::memory_order_acquire);
    uint32_t next = 0;
    auto splice_group = [&] {
      while (next < r.script_depth) {
        const bool entry = script != nullptr && (script[next].flags & script_frame_entry) != 0;
        frames->push_back(script_info(script, next++));
        if (entry) break;
      }
    };
    for (uint32_t i = 0; i < r.depth; ++i) {
      if (next < r.script_depth && in_interpreter_loop(r.frames[i])) {
        splice_group();
        continue;
      }
      frames->push_back(addresses_[r.frames[i]]);
      frames->back().interpreter = r.script_depth > 0 && in_interpreter_module(r.frames[i]);
    }
    while (next < r.script_depth) frames->push_back(script_info(script, next++));
  }

 private:
  static frame_info script_info(const script_frame* script, uint32_t i) {
    frame_info f;
    f.script = true;
    if (script == nullptr) return f;  // not described (the provider failed): function unknown
    f.function = script[i].function;
    f.file = script[i].file;
    f.line = script[i].line;
    f.borrowed = (script[i].flags & script_frame_borrowed) != 0;
    return f;
  }

  call_site_table& sites_;
  std::unordered_map<uintptr_t, frame_info> addresses_;
  std::unordered_map<uint32_t, described_site> described_;
};

}  // namespace tracepool::core
