#include "stats.h"

namespace tracepool::core {

void stat_table::reset_peak() {
  for (auto& column : cells_)
    for (auto& s : column) s.reset_peak();
}

void stat_table::reset_accumulated() {
  for (auto& column : cells_)
    for (auto& s : column) s.reset_accumulated();
}

stat_table& stat_table::operator+=(const stat_table& o) {
  for (size_t c = 0; c < cells_.size(); ++c)
    for (size_t k = 0; k < cells_[c].size(); ++k) cells_[c][k] += o.cells_[c][k];
  return *this;
}

}  // namespace tracepool::core
