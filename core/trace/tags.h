// tags.h: user labels for phases of a program ("validation", "optimizer"), pushed and popped per
// thread and recorded with every call site captured while they are active.
//
// A tag *set* is the thread's stack of labels, interned as a node (parent set, label) so that the
// allocation path reads one thread-local integer. Set 0 is "no tag". Tags are process-wide (the C
// API's tracepool_tag_push takes no handle); the registry is never destroyed, so reports can read
// it during exit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tracepool::core {

inline constexpr int max_tag_depth = 64;
inline constexpr size_t max_label_bytes = 256;

// The calling thread's current tag set.
uint32_t current_tags();
status push_tag(const char* label);
status pop_tag();
// Labels of a tag set, outermost first.
std::vector<std::string> tag_labels(uint32_t tags);
// Checks a label given by a user: not null, not empty, at most max_label_bytes, no control bytes.
status check_label(const char* what, const char* label);
// The same rule for any short name (`noun` names it in the message: "source"), at most `most` bytes.
status check_name(const char* what, const char* noun, const char* text, size_t most);

}  // namespace tracepool::core
