// history_labels.cpp: the labels of history_labels.h.
#include "history_labels.h"

namespace tracepool::core {

history_labels::history_labels(int devices)
    : devices_count_(devices > 0 ? devices : 0),
      current_(new std::atomic<id>[static_cast<size_t>(devices_count_)]),
      devices_(static_cast<size_t>(devices_count_)),
      table_{label{}} {
  ids_.emplace(std::make_pair(std::string(), std::string()), none);
  for (int d = 0; d < devices_count_; ++d) current_[d].store(none, std::memory_order_relaxed);
}

const history_labels::label& history_labels::overflow_label() {
  static const label l{"(more distinct labels than tracepool keeps)", "(more distinct labels than tracepool keeps)"};
  return l;
}

status history_labels::check_device(int device, const char* what) const {
  if (device >= 0 && device < devices_count_) return status::ok;
  return fail(status::invalid_device, "%s: device %d does not exist: there are %d", what, device, devices_count_);
}

// A pair seen before keeps its id; a new one takes the next, until the ids run out.
void history_labels::relabel(int device) {
  const device_state& d = devices_[static_cast<size_t>(device)];
  auto key = std::make_pair(d.metadata, d.contexts.empty() ? std::string() : d.contexts.back());
  id found = overflow;
  if (auto it = ids_.find(key); it != ids_.end()) {
    found = it->second;
  } else if (table_.size() < overflow) {
    found = static_cast<id>(table_.size());
    table_.push_back(label{key.first, key.second});
    ids_.emplace(std::move(key), found);
  }
  current_[device].store(found, std::memory_order_relaxed);
}

status history_labels::set_metadata(int device, std::string metadata) {
  if (status s = check_device(device, "set_metadata"); s != status::ok) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  devices_[static_cast<size_t>(device)].metadata = std::move(metadata);
  relabel(device);
  return status::ok;
}

status history_labels::metadata(int device, std::string* out) const {
  if (status s = check_device(device, "metadata"); s != status::ok) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  *out = devices_[static_cast<size_t>(device)].metadata;
  return status::ok;
}

status history_labels::push_context(int device, std::string context) {
  if (status s = check_device(device, "push_context"); s != status::ok) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  devices_[static_cast<size_t>(device)].contexts.push_back(std::move(context));
  relabel(device);
  return status::ok;
}

status history_labels::pop_context(int device) {
  if (status s = check_device(device, "pop_context"); s != status::ok) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string>& contexts = devices_[static_cast<size_t>(device)].contexts;
  if (!contexts.empty()) contexts.pop_back();
  relabel(device);
  return status::ok;
}

std::vector<history_labels::label> history_labels::table() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_;
}

}  // namespace tracepool::core
