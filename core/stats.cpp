#include "stats.h"

namespace tracepool::core {

void stat_table::reset_peak() {
  for (auto& row : cells)
    for (auto& s : row) s.reset_peak();
}

void stat_table::reset_accumulated() {
  for (auto& row : cells)
    for (auto& s : row) s.reset_accumulated();
}

stat_table& stat_table::operator+=(const stat_table& o) {
  for (size_t k = 0; k < cells.size(); ++k)
    for (size_t p = 0; p < cells[k].size(); ++p) cells[k][p] += o.cells[k][p];
  return *this;
}

}  // namespace tracepool::core
