#include "trainrt/runtime/arena_peak_log.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>

#include "trainrt/core/logging.h"

namespace trainrt {

void log_arena_peak(const Graph& graph, const ExecutionPlan& plan, const std::vector<BufferSpec>& buffers,
                    const std::unordered_map<int, int>& buffer_of_slot) {
  std::vector<int> root_of(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    size_t root = b;
    while (buffers[root].alias_of != kNoAlias) root = static_cast<size_t>(buffers[root].alias_of);
    root_of[b] = static_cast<int>(root);
  }
  std::unordered_map<int, std::pair<int, int>> span;  // root -> (first, last) step of its chain
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (buffers[static_cast<size_t>(root_of[b])].preexisting) continue;
    auto [it, added] = span.try_emplace(root_of[b], buffers[b].first_step, buffers[b].last_step);
    it->second = {std::min(it->second.first, buffers[b].first_step), std::max(it->second.second, buffers[b].last_step)};
  }
  const int num_steps = static_cast<int>(plan.steps.size());
  int peak_step = 0;
  size_t peak = 0;
  for (int s = 0; s < num_steps; ++s) {
    size_t live = 0;
    for (const auto& [root, life] : span)
      if (life.first <= s && s <= life.second) live += buffers[static_cast<size_t>(root)].size_bytes;
    if (live > peak) std::tie(peak, peak_step) = std::tie(live, s);
  }
  std::vector<std::pair<size_t, std::string>> live;
  for (const auto& [slot, b] : buffer_of_slot) {
    const auto it = span.find(b);
    if (it == span.end() || it->second.first > peak_step || it->second.second < peak_step) continue;
    const Value* v = plan.slots[static_cast<size_t>(slot)].value;
    live.emplace_back(buffers[static_cast<size_t>(b)].size_bytes, v ? v->name : std::string("?"));
  }
  std::sort(live.rbegin(), live.rend());
  std::ostringstream log;
  log << "arena peak of graph '" << graph.name << "': " << peak << " bytes at step " << peak_step << " ("
      << plan.steps[static_cast<size_t>(peak_step)].node->describe() << "), largest live:";
  for (size_t i = 0; i < live.size() && i < 8; ++i) log << "\n  " << live[i].first << " " << live[i].second;
  TRAINRT_LOG(kVerbose) << log.str();
}

}  // namespace trainrt
