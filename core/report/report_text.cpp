// report_text.cpp: the text rendering of a report: the top sites by bytes, each with the few
// frames that say where it is.
//
// Every string the report holds came from outside (symbol tables, the host, labels, a saved file a user
// was sent): each is shown through printable() (Note [Printable text] in base/printable.h) and joined
// to the text as a std::string, never through printf_string's "%s", which would stop at a NUL and at
// its buffer's end.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>

#include "base/printable.h"
#include "report/report.h"
#include "report/wording.h"

namespace tracepool::core {

namespace {

constexpr size_t frames_shown = 5;
constexpr size_t series_shown = 8;  // live bytes at the latest marks, for a growing site
constexpr size_t marks_shown = 12;  // marks listed: the first quarter of them, then the latest

std::string function_name(const frame_info& f) { return printable(frame_function(f)); }

std::string file_and_line(const std::string& file, int line) { return printable(file) + ":" + std::to_string(line); }

// Said after a site's first borrowed frame: its script frames are those of the thread for which
// another thread did the work (autograd's engine thread runs backward for the thread that called it).
constexpr const char* borrowed_note = ", on the thread that started this work";

std::string frame_line(const frame_info& f, bool note_borrowed = true) {
  std::string line = "at " + function_name(f);
  if (!f.file.empty() && f.line > 0)
    line += " (" + file_and_line(f.file, f.line) + ")";
  else if (!f.module.empty())
    line += " (in " + printable(base_name(f.module)) + ")";
  return line + (f.borrowed && note_borrowed ? borrowed_note : "");
}

// The script frames of a stack, innermost first, and the first of them that is the user's own.
struct python_view {
  std::vector<const frame_info*> frames;
  size_t first_user = 0;
};

python_view python_frames(const std::vector<frame_info>& fs) {
  python_view v;
  for (const frame_info& f : fs)
    if (f.script) v.frames.push_back(&f);
  while (v.first_user < v.frames.size() && is_library(*v.frames[v.first_user])) ++v.first_user;
  if (v.first_user == v.frames.size()) v.first_user = 0;  // no user frame: from the innermost
  return v;
}

// `name` when `function` is "PREFIX name::SUFFIX..." (a demangled name), else "".
std::string name_between(const std::string& function, const char* prefix, const char* suffix) {
  if (function.rfind(prefix, 0) != 0) return "";
  const size_t begin = std::strlen(prefix), end = function.find("::", begin);
  if (end == std::string::npos || function.compare(end + 2, std::strlen(suffix), suffix) != 0) return "";
  return function.substr(begin, end - begin);
}

// The PyTorch operator that asked for a block, from the native frames before the first script frame:
// the outermost ATen operator called (at::_ops::NAME::call, the dispatcher's entry; the ones inside
// it, such as the empty_strided that zeros_like calls, are how it allocates), and the autograd node
// that called it when backward ran it. "aten::zeros_like", "aten::threshold_backward in
// ReluBackward0"; "" when the stack holds no operator (not PyTorch, or unsymbolised frames).
std::string pytorch_op(const std::vector<frame_info>& fs) {
  std::string op, node;
  for (const frame_info& f : fs) {
    if (f.script) break;
    if (std::string name = name_between(f.function, "at::_ops::", "call("); !name.empty()) {
      op = std::move(name);
      node.clear();  // a node counts only if it called this operator
    } else if (std::string n = name_between(f.function, "torch::autograd::generated::", "apply(");
               !n.empty() && !op.empty() && node.empty()) {
      node = std::move(n);
    }
  }
  if (op.empty()) return "";
  return printable("aten::" + op + (node.empty() ? "" : " in " + node));
}

// "in ..." naming what the user's line called: the PyTorch operator if there is one (then, when
// library frames come before the user's, the innermost of those too), else the innermost script
// frame when library frames come before the user's, else the innermost native frame that is not the
// interpreter's own; "" if none.
std::string entry_line(const std::vector<frame_info>& fs, const python_view& v) {
  std::string op = pytorch_op(fs);
  if (v.first_user > 0) {
    const frame_info& f = *v.frames[0];
    const std::string caller = function_name(f) + " (" + file_and_line(base_name(f.file), f.line) + ")";
    return op.empty() ? "in " + caller : "in " + op + ", from " + caller;
  }
  if (!op.empty()) return "in " + op;
  for (const frame_info& n : fs) {
    if (n.script) break;
    if (n.interpreter) continue;
    const std::string module = printable(base_name(n.module));
    if (n.function.empty()) return "in " + (n.module.empty() ? function_name(n) : module);
    return "in " + function_name(n) + (n.module.empty() ? "" : " (" + module + ")");
  }
  return "";
}

// The frames that say where. With script frames: one line naming what was called, then the user's
// innermost Python lines and their callers, and nothing beyond a module's top level (what ran it is
// runpy or `python -m tracepool run`). Otherwise the innermost native frames, and nothing beyond main
// (the C runtime's start).
void frames(std::string& out, const std::vector<frame_info>& fs) {
  if (fs.empty()) {
    out += "       (no call site: capture was off or the site table was full)\n";
    return;
  }
  const python_view v = python_frames(fs);
  if (!v.frames.empty()) {
    if (const std::string entry = entry_line(fs, v); !entry.empty()) out += "       " + entry + "\n";
    size_t i = v.first_user;
    for (; i < v.frames.size() && i < v.first_user + frames_shown; ++i) {
      const bool note = i == v.first_user || !v.frames[i - 1]->borrowed;  // once per borrowed run
      out += "       " + frame_line(*v.frames[i], note) + "\n";
      if (v.frames[i]->function == "<module>") return;
    }
    if (i < v.frames.size()) out += printf_string("       ... %zu more Python frames\n", v.frames.size() - i);
    return;
  }
  if (const std::string op = pytorch_op(fs); !op.empty()) out += "       in " + op + "\n";
  size_t shown = 0;
  while (shown < fs.size() && shown < frames_shown) {
    out += "       " + frame_line(fs[shown]) + "\n";
    if (fs[shown++].function == "main") return;
  }
  if (shown < fs.size()) out += printf_string("       ... %zu more frames\n", fs.size() - shown);
}

// A site in one line (Note [Site titles]), made safe to print: "at train_step (train.py:88)".
std::string at_title(const std::vector<frame_info>& fs) {
  return fs.empty() ? "(no call site recorded)" : "at " + printable(site_title(fs));
}

std::string tags_of(const std::vector<std::string>& tags) { return printable(tag_list(tags)); }

std::string blocks_word(int64_t n) { return n == 1 ? "1 block" : std::to_string(n) + " blocks"; }

// Shows the first `top` entries with show(index, entry); the rest in one line: "... 3 more sites
// holding 24.00 KiB" (bytes(entry) of each).
template <typename T, typename Bytes, typename Show>
void first_of(std::string& out, const std::vector<T>& all, size_t top, const char* what, Bytes&& bytes, Show&& show) {
  int64_t rest_bytes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < top)
      show(i, all[i]);
    else
      rest_bytes += bytes(all[i]);
  }
  if (all.size() > top)
    out += printf_string("  ... %zu more %s holding %s\n", all.size() - top, what, human_bytes(rest_bytes).c_str());
}

// "held by CUDA graph created at capture (train.py:88)"; the device is named when there are several.
std::string pool_name(const report& r, const pool_summary& p) {
  std::string name = "held by " + (p.label.empty() ? std::string(unlabelled_pool) : printable(p.label));
  if (r.devices.size() > 1) name += printf_string(" on device %d", p.device);
  return name + (p.frames.empty() ? " (no call site recorded)" : " created " + at_title(p.frames));
}

// Each device's bytes reserved by private pools, in one pass over the pools.
std::map<int, int64_t> pool_bytes_by_device(const report& r) {
  std::map<int, int64_t> bytes;
  for (const pool_summary& p : r.pools) bytes[p.device] += p.reserved_bytes;
  return bytes;
}

// Retained private pools, each with the sites of its live blocks; nothing when there are none.
void pools(std::string& out, const report& r, size_t top) {
  if (r.pools.empty()) return;
  out +=
      "\nPrivate pools: memory kept for CUDA graphs and memory pools the program still holds (neither leaked nor "
      "cached), largest first:\n";
  const auto reserved = [](const pool_summary& p) { return p.reserved_bytes; };
  first_of(out, r.pools, top, "pools", reserved, [&](size_t, const pool_summary& p) {
    out += "  " + pool_name(r, p) +  // a label may be long: not through printf_string's buffer
           printf_string(": %s (%s live in %s, %s of its %s free inside the pool)\n",
                         human_bytes(p.reserved_bytes).c_str(), human_bytes(p.bytes).c_str(),
                         blocks_word(p.blocks).c_str(), human_bytes(p.cached_bytes).c_str(),
                         human_bytes(p.reserved_bytes).c_str());
    for (const pool_site_summary& s : p.sites) {
      out += printf_string("       %s in %s ", human_bytes(s.bytes).c_str(), blocks_word(s.blocks).c_str());
      out += at_title(s.frames) + "\n";
    }
  });
}

// What the device holds outside the pool that the interposer saw or a runtime told of (Note [Observed memory]); ""
// for none.
std::string observed_line(const device_summary& d) {
  if (d.observed_bytes == 0 && d.observed_managed_bytes == 0 && d.observed_host_bytes == 0) return "";
  return "  seen outside the pool (by the interposer, or told through tracepool_observe_alloc): " + human_bytes(d.observed_bytes) +
         " on the device, " +
         (d.observed_managed_bytes != 0 ? human_bytes(d.observed_managed_bytes) + " managed (on the device where touched), " : "") +
         human_bytes(d.observed_host_bytes) + " pinned host; their sites are below, tagged by source\n";
}

std::string page_words() { return std::to_string(free_page_size >> 20) + " MiB"; }  // "2 MiB"

// Note [Fragmentation in reports], one line under the device's; nothing for a report that predates it.
std::string fragmentation_line(const device_summary& d) {
  if (d.segments.empty() && d.free_page_bytes < 0) return "";
  std::string line =
      "  fragmentation " + human_bytes(fragmentation_bytes(d)) + " (cached outside the largest free block)";
  if (d.free_page_bytes >= 0)
    line += "; " + human_bytes(d.free_page_bytes) + " of the cache in whole " + page_words() + " pages";
  if (!d.segments.empty())
    line += "; segments: " + printable(d.segments) +
            (d.growable_available ? "" : " (growable not available on this device)");
  return line + "\n";
}

// Whether growable segments would have served the failed request (Note [Fragmentation in reports]):
// the device's free memory and the free cache in whole pages against the request. "" when the report
// does not say which segments the device uses.
std::string growable_verdict(const report& r, const device_summary& d) {
  if (d.segments == segments_growable)
    return " Growable segments are on: the retry gave the free pieces of the cache back to the device (none during "
           "a CUDA graph capture, nor those of private pools still in use); what stays cached is in pieces partly "
           "in use.";
  if (d.segments.empty()) return "";
  if (!d.growable_available)
    return " This device cannot map memory into reserved ranges, so growable segments are not available.";
  if (d.free_page_bytes < 0) return "";
  const int64_t device_free = d.total_bytes > d.used_bytes ? d.total_bytes - d.used_bytes : 0;
  const std::string pages = human_bytes(d.free_page_bytes), free = human_bytes(device_free);
  if (static_cast<uint64_t>(device_free) + static_cast<uint64_t>(d.free_page_bytes) >= r.oom_requested)
    return " Growable segments (TRACEPOOL_CONF=segments:growable) would likely have fit it: they give back the " +
           pages + " of free cache in whole " + page_words() + " pages, and the device has " + free + " free.";
  return " Growable segments would not have fit it either: free cache in whole pages (" + pages +
         ") and the device's free memory (" + free + ") come to less than the request.";
}

}  // namespace

// The driver's used bytes by process (Note [Where the memory went] in device_memory.cpp), one line.
std::string by_process(const report& r, const device_summary& d) {
  const char* source = r.backend == "host" ? "the host backend's" : "NVML's";
  if (!d.processes_listed)
    return d.processes_note.empty() ? "" : "  by process: not listed (" + printable(d.processes_note) + ")\n";
  const process_split split = split_by_process(d, r.process.pid);
  const int64_t reserved = d.stats.table.at(stat_kind::reserved_bytes, all_pools).current;
  std::string line = printf_string("  by process (%s list): ", source);
  if (d.processes.empty()) {
    line += "no process listed";
  } else if (!d.context) {
    line += printf_string("%d process%s %s", split.others, split.others == 1 ? "" : "es",
                          human_bytes(split.others_bytes).c_str());
  } else if (!split.self_listed) {
    line += printf_string("this process (pid %" PRId64 ") is not listed (in another PID namespace?)", r.process.pid);
  } else if (!split.self_known) {
    line += printf_string("this process (pid %" PRId64 "): its use is not visible", r.process.pid);
  } else {
    line += printf_string("this process (pid %" PRId64 ") %s", r.process.pid, human_bytes(split.self_bytes).c_str());
    if (split.self_bytes >= reserved)
      line += ", " + human_bytes(split.self_bytes - reserved) + " of it outside tracepool (its CUDA context, libraries)";
  }
  if (!d.processes.empty() && d.context)
    line += printf_string("; %d other process%s %s", split.others, split.others == 1 ? "" : "es",
                          human_bytes(split.others_bytes).c_str());
  std::string pids;
  int shown = 0;
  for (const backend::process_usage& p : d.processes) {
    if (p.pid == r.process.pid) continue;
    if (shown++ == 4) {
      pids += ", ...";
      break;
    }
    pids += printf_string("%spid %" PRId64 ": %s", pids.empty() ? "" : ", ", p.pid,
                          p.used_bytes < 0 ? "not visible" : human_bytes(p.used_bytes).c_str());
  }
  if (!pids.empty()) line += " (" + pids + ")";
  const char* rest = split.unknown == 0 ? "in no process (the driver's own)"
                                        : "in no figure NVML gave (the driver's own, and the processes not visible)";
  return line + "; " + human_bytes(split.unlisted_bytes) + " " + rest + "\n";
}

// What keeps a site's blocks alive, where the host named it (holder_summary).
void holders(std::string& out, const report& r, const site_summary& s) {
  for (const holder_summary& h : s.held_by) {
    out += "       held by " + printable(h.holder) + ": " + human_bytes(h.bytes) + " in " + blocks_word(h.blocks);
    out += h.example.empty() ? "\n" : ", e.g. " + printable(h.example) + "\n";
  }
  if (r.holders.made && s.held_by.empty() && s.growing)
    out += "       held by: no Python object found that exposes these blocks\n";
}

// How growing sites were told apart (Note [Growth without marks]), and how the holder search went.
void growth(std::string& out, const report& r) {
  if (r.growth_basis == growth_basis_auto) {
    std::vector<std::pair<std::string_view, size_t>> kinds;  // label -> marks kept, in order of first sight
    std::map<std::string_view, size_t> kind_of;               // label -> its place in kinds
    for (const mark_summary& m : r.auto_marks) {
      const auto [it, first] = kind_of.emplace(m.label, kinds.size());
      if (first) kinds.emplace_back(m.label, 0);
      ++kinds[it->second].second;
    }
    std::string list;
    for (const auto& [label, n] : kinds)
      list += (list.empty() ? "" : ", ") + printable(label) + " x" + std::to_string(n);
    out += printf_string("Growth told without marks: from %llu automatic marks (kept %zu: ",
                         static_cast<unsigned long long>(r.auto_marks_made), r.auto_marks.size()) +
           list +
           printf_string("), now at least %llu ms apart, taken in %.2f ms in all. GROWING: ",
                         static_cast<unsigned long long>(r.auto_mark_ms), r.auto_mark_seconds * 1e3) +
           (r.auto_marks.size() >= long_series_marks
                ? "the lowest live bytes in each sixteenth of the run never fell, rose twice, and rose in the "
                  "second half.\n"
                : "few marks, so clean steps only: the lowest live bytes in each eighth of the run never fell, and "
                  "rose twice above all the site held before, once in the second half.\n");
  } else if (r.growth_basis == growth_basis_none && r.auto_mark_ms != 0) {
    out += printf_string("Growth: %zu automatic marks so far, too few to tell growing sites (%zu needed); no marks made. "
                         "To tell in a short run, mark each epoch (tracepool.mark(\"epoch\"), tracepool_mark in C): "
                         "three marks are enough.\n",
                         r.auto_marks.size(), min_growth_marks);
  }
  if (!r.holders.made) return;
  out += printf_string("Holders: %" PRId64 " Python objects searched in %.2f s, %" PRId64 " expose blocks%s",
                       r.holders.objects, r.holders.seconds, r.holders.exposing,
                       r.holders.complete ? "" : "; cut short");
  out += (r.holders.note.empty() ? "" : ": " + printable(r.holders.note)) + "\n";
}

std::string to_text(const report& r, size_t top) {
  std::string out;
  const bool estimated = r.sample_bytes != 0;
  out += "== tracepool report (" + printable(r.reason) + "): " + printable(r.backend) + " backend";
  if (r.capture == "off")
    out += ", call-site capture off\n";
  else if (r.capture == "python")
    out += printf_string(", Python stacks of up to %d frames", r.python_depth);
  else
    out += ", " + printable(r.unwinder) + printf_string(" stacks of up to %d frames", r.capture_depth);
  if (r.capture != "off")
    out += estimated ? printf_string(", sampled every %s on average: site figures are estimates\n",
                                     human_bytes(static_cast<int64_t>(r.sample_bytes)).c_str())
                     : ", every allocation\n";
  if (r.process.rank >= 0) {  // several ranks may print to one terminal: say whose report this is
    out += printf_string("rank %" PRId64, r.process.rank);
    if (r.process.world_size > 0) out += printf_string(" of %" PRId64, r.process.world_size);
    if (r.process.local_rank >= 0) out += printf_string(" (local rank %" PRId64 ")", r.process.local_rank);
    out += printf_string(", pid %" PRId64 " on ", r.process.pid) + printable(r.process.host) + "\n";
  }
  if (r.reason == "oom") out += "Out of memory: " + printable(r.oom_message) + "\n";
  const std::map<int, int64_t> pool_bytes = pool_bytes_by_device(r);
  for (const device_summary& d : r.devices) {
    const auto& t = d.stats.table;
    if (!d.context) {  // Note [No context as a side effect] in backend.h: nothing of this process is there
      out += printf_string("device %d: not used by this process (no context on it)", d.device);
      if (d.total_bytes > 0)
        out += printf_string("; the driver counts %s of %s used", human_bytes(d.used_bytes).c_str(),
                             human_bytes(d.total_bytes).c_str());
      out += "\n" + observed_line(d);
      if (d.total_bytes > 0) out += by_process(r, d);
      continue;
    }
    out += printf_string(
        "device %d: %s allocated in %s (peak %s); %s reserved; %s cached (reserved but free), largest free block %s",
        d.device, human_bytes(t.at(stat_kind::allocated_bytes, all_pools).current).c_str(),
        blocks_word(t.at(stat_kind::allocation, all_pools).current).c_str(),
        human_bytes(t.at(stat_kind::allocated_bytes, all_pools).peak).c_str(),
        human_bytes(t.at(stat_kind::reserved_bytes, all_pools).current).c_str(), human_bytes(d.cached_bytes).c_str(),
        human_bytes(d.largest_free_block).c_str());
    const auto pooled = pool_bytes.find(d.device);
    const int64_t in_pools = pooled == pool_bytes.end() ? 0 : pooled->second;
    out += in_pools == 0 ? "\n" : "; " + human_bytes(in_pools) + " reserved by private pools\n";
    out += fragmentation_line(d);
    out += observed_line(d);
    if (d.total_bytes > 0 && d.observed_bytes == 0)  // Note [Where the memory went]
      out += printf_string(
          "  the driver counts %s of %s used (what nvidia-smi shows): %s reserved by tracepool, %s outside it "
          "(the CUDA context, libraries' own allocations such as cuBLAS/cuDNN workspaces and NCCL buffers, other "
          "processes)\n",
          human_bytes(d.used_bytes).c_str(), human_bytes(d.total_bytes).c_str(),
          human_bytes(t.at(stat_kind::reserved_bytes, all_pools).current).c_str(), human_bytes(outside_bytes(d)).c_str());
    else if (d.total_bytes > 0)  // the interposer saw (some of) the rest: what it did not see is what is left
      out += printf_string(
          "  the driver counts %s of %s used (what nvidia-smi shows): %s reserved by tracepool, %s seen outside it "
          "(below, by source), %s not seen (kernels loaded lazily, the driver's own, other processes)\n",
          human_bytes(d.used_bytes).c_str(), human_bytes(d.total_bytes).c_str(),
          human_bytes(t.at(stat_kind::reserved_bytes, all_pools).current).c_str(), human_bytes(d.observed_bytes).c_str(),
          human_bytes(std::max<int64_t>(0, outside_bytes(d) - d.observed_bytes)).c_str());
    if (d.total_bytes > 0) out += by_process(r, d);
  }

  const char* held = r.reason == "exit" ? "Leaked: memory still allocated at exit" : "Live: memory allocated now";
  out += printf_string("\n%s, by call site, largest first%s:\n", held, estimated ? " (estimated)" : "");
  if (r.leaks.empty()) out += "  none\n";
  const auto requested = [](const site_summary& s) { return s.bytes; };
  first_of(out, r.leaks, top, "sites", requested, [&](size_t i, const site_summary& s) {
    out += printf_string("  #%zu %s in %s", i + 1, human_bytes(s.bytes).c_str(), blocks_word(s.blocks).c_str()) +
           tags_of(s.tags);
    if (s.growing && r.growth_basis == growth_basis_auto && !s.growth_floors.empty()) {
      const auto& f = s.growth_floors;  // Note [Growth by window floors]
      out += printf_string("  GROWING without marks: lowest live %s in the run's first %s, %s at mid-run, %s in its last",
                           human_bytes(f.front()).c_str(), f.size() == growth_windows ? "sixteenth" : "eighth",
                           human_bytes(f[f.size() / 2]).c_str(), human_bytes(f.back()).c_str());
    } else if (s.growing) {
      out += "  GROWING across marks:";
      const size_t n = s.live_at_marks.size(), from = n > series_shown ? n - series_shown : 0;
      if (from > 0) out += " ...";
      for (size_t m = from; m < n; ++m) out += " " + human_bytes(s.live_at_marks[m]);
    }
    out += printf_string("  (peak %s, %s allocated in all)\n", human_bytes(s.peak_bytes).c_str(),
                         human_bytes(s.total_bytes).c_str());
    frames(out, s.frames);
    holders(out, r, s);
  });
  growth(out, r);
  pools(out, r, top);

  if (!r.marks.empty()) {
    out += "\nRetained: live blocks born before a mark and still alive after it, by call site:\n";
    if (r.retained.empty()) out += "  none\n";
    // One entry a site (r.retained is by bytes, so sites come in the order of their largest part), its
    // parts by the mark before their birth: a site born again after every mark grows.
    std::vector<std::vector<const retained_summary*>> by_site;
    std::map<size_t, size_t> entry_of;
    for (const retained_summary& t : r.retained) {
      auto [it, added] = entry_of.emplace(t.leak, by_site.size());
      if (added) by_site.emplace_back();
      by_site[it->second].push_back(&t);
    }
    for (size_t i = 0; i < by_site.size() && i < top; ++i) {
      std::vector<const retained_summary*> parts = by_site[i];
      std::sort(parts.begin(), parts.end(), [](const retained_summary* x, const retained_summary* y) {
        return x->born_after < y->born_after;
      });
      const site_summary& s = r.leaks[parts.front()->leak];
      int64_t bytes = 0, blocks = 0;
      std::string when;
      for (const retained_summary* t : parts) {
        bytes += t->bytes;
        blocks += t->blocks;
        const std::string born = t->born_after < 0 ? "before the first mark"
                                                   : "after '" + printable(r.marks[static_cast<size_t>(t->born_after)].label) + "'";
        when += std::string(when.empty() ? "" : ", ") + human_bytes(t->bytes) + " born " + born +
                printf_string(" (alive through %llu)", static_cast<unsigned long long>(t->marks_survived));
      }
      out += "  " + human_bytes(bytes) + " in " + blocks_word(blocks) + tags_of(s.tags) + ": " + when + "\n";
      if (!s.frames.empty()) out += "       " + at_title(s.frames) + "\n";
    }
    out += r.marks_made > r.marks.size()
               ? printf_string("\nMarks (%llu made; kept: the first, the latest and %zu between):\n",
                               static_cast<unsigned long long>(r.marks_made), r.marks.size() - 2)
               : "\nMarks:\n";
    for (size_t i = 0; i < r.marks.size(); ++i) {
      if (r.marks.size() > marks_shown && i == marks_shown / 4) {
        out += printf_string("  ... %zu more\n", r.marks.size() - marks_shown);
        i = r.marks.size() - (marks_shown - marks_shown / 4);
      }
      const mark_summary& m = r.marks[i];
      const std::string label = printable(m.label);
      out += "  " + label + std::string(label.size() < 24 ? 24 - label.size() : 0, ' ') + " " +
             human_bytes(m.live_bytes) + " live\n";
    }
  }

  out +=
      "\nCached: reserved but free (a caching allocator keeps it for reuse; empty_cache returns it), by the site "
      "that last used it:\n";
  if (r.cached.empty()) out += "  none\n";
  for (size_t i = 0; i < r.cached.size() && i < top; ++i) {
    const cached_summary& c = r.cached[i];
    out += printf_string("  #%zu %s in %s free, largest %s, %s of it inside partly used segments", i + 1,
                         human_bytes(c.bytes).c_str(), blocks_word(c.blocks).c_str(),
                         human_bytes(c.largest_free_block).c_str(), human_bytes(c.inactive_split_bytes).c_str()) +
           tags_of(c.tags) + "\n";
    frames(out, c.frames);
  }
  return out;
}

std::string oom_summary(const report& r, int device) {
  std::string out;
  for (const device_summary& d : r.devices) {
    if (d.device != device) continue;
    out += printf_string("Largest free block on device %d: %s; cached (reserved but free): %s.", device,
                         human_bytes(d.largest_free_block).c_str(), human_bytes(d.cached_bytes).c_str());
    out += printf_string(" Fragmentation: %s of the %s cached lies outside the largest free block (%s).",
                         human_bytes(fragmentation_bytes(d)).c_str(), human_bytes(d.cached_bytes).c_str(),
                         human_bytes(d.largest_free_block).c_str());
    out += growable_verdict(r, d);
  }
  out += " Top call sites holding memory:";
  if (r.leaks.empty()) out += " none";
  for (size_t i = 0; i < r.leaks.size() && i < 3; ++i) {
    const site_summary& s = r.leaks[i];
    out += printf_string("\n  %s in %s ", human_bytes(s.bytes).c_str(), blocks_word(s.blocks).c_str());
    out += at_title(s.frames);
  }
  for (const pool_summary& p : r.pools)
    if (p.device == device)
      out += "\n  " + human_bytes(p.reserved_bytes) + " " + pool_name(r, p) + ", " + human_bytes(p.cached_bytes) +
             " of it free inside the pool";
  return out;
}

}  // namespace tracepool::core
