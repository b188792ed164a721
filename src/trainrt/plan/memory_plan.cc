#include "trainrt/plan/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "trainrt/core/error.h"

namespace trainrt {

std::string_view to_string(AllocKind kind) {
  switch (kind) {
    case AllocKind::kAllocate: return "allocate";
    case AllocKind::kReuse: return "reuse";
    case AllocKind::kShare: return "share";
    case AllocKind::kPreexisting: return "preexisting";
    case AllocKind::kNotPlaced: return "not placed";
  }
  return "unknown";
}

namespace {

// One block of the arena: a root buffer and every buffer written in place over it.
struct Group {
  int root = 0;
  size_t size = 0;  // the root's: an alias is never larger than its target
  int first_step = 0;
  int last_step = 0;
  size_t offset = 0;
  bool fixed = false;     // placed by the caller (BufferSpec::fixed_offset)
  bool optional = false;  // BufferSpec::optional; offset kNoOffset when it fit nowhere
};

struct Grouping {
  std::vector<Group> groups;
  std::vector<int> group_of;  // per buffer; -1 when the buffer is preexisting (or aliases one)
};

constexpr int kNoGroup = -1;

// The root of every buffer's alias chain. A chain longer than the number of buffers has a cycle.
std::vector<int> find_roots(std::span<const BufferSpec> buffers) {
  const int n = static_cast<int>(buffers.size());
  std::vector<int> root(buffers.size(), kNoAlias);
  std::vector<int> path;
  for (int i = 0; i < n; ++i) {
    int b = i;
    path.clear();
    while (root[b] == kNoAlias && buffers[b].alias_of != kNoAlias) {
      const int target = buffers[b].alias_of;
      TRAINRT_CHECK(0 <= target && target < n && target != b, "buffer ", b, " aliases buffer ",
                    target, ", but there are ", n, " buffers");
      TRAINRT_CHECK(buffers[b].size_bytes <= buffers[target].size_bytes, "buffer ", b, " (",
                    buffers[b].size_bytes, " bytes) is larger than buffer ", target, " (",
                    buffers[target].size_bytes, " bytes) it overwrites in place");
      TRAINRT_CHECK(!buffers[b].preexisting, "buffer ", b,
                    " is preexisting: it owns its memory and cannot alias buffer ", target);
      TRAINRT_CHECK(buffers[b].fixed_offset == kNoOffset, "buffer ", b,
                    " has a fixed offset: it cannot alias buffer ", target, ", whose offset it shares");
      TRAINRT_CHECK(!buffers[b].optional && !buffers[target].optional, "buffer ", b, " aliases buffer ", target,
                    ", but optional buffers are neither aliases nor aliased");
      path.push_back(b);
      TRAINRT_CHECK(static_cast<int>(path.size()) <= n, "buffer ", i, " is on a cycle of aliases");
      b = target;
    }
    const int r = root[b] == kNoAlias ? b : root[b];
    root[b] = r;
    for (int p : path) root[p] = r;
  }
  return root;
}

// Groups buffers by alias root; a group lives from its earliest first_step to its latest last_step.
Grouping group_buffers(std::span<const BufferSpec> buffers) {
  const std::vector<int> roots = find_roots(buffers);
  Grouping result;
  result.group_of.assign(buffers.size(), kNoGroup);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferSpec& root = buffers[roots[i]];
    if (root.preexisting) continue;
    const BufferSpec& b = buffers[i];
    TRAINRT_CHECK(0 <= b.first_step && b.first_step <= b.last_step, "buffer ", i,
                  " has an empty lifetime [", b.first_step, ", ", b.last_step, "]");
    int& g = result.group_of[roots[i]];
    if (g == kNoGroup) {
      g = static_cast<int>(result.groups.size());
      result.groups.push_back({roots[i], root.size_bytes, b.first_step, b.last_step});
      if (root.fixed_offset != kNoOffset) {
        result.groups.back().offset = root.fixed_offset;
        result.groups.back().fixed = true;
      }
      result.groups.back().optional = root.optional;
    }
    Group& group = result.groups[g];
    group.first_step = std::min(group.first_step, b.first_step);
    group.last_step = std::max(group.last_step, b.last_step);
    result.group_of[i] = g;
  }
  return result;
}

size_t align_up(size_t x, size_t alignment) { return (x + alignment - 1) & ~(alignment - 1); }

bool lifetimes_overlap(const Group& a, const Group& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

bool memory_overlaps(const Group& a, const Group& b) {
  return a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

// The lowest aligned offset at which `g` overlaps in memory no placed group live at the same time.
// `placed` is sorted by offset, so one scan finds the first gap that fits: `candidate` stays above
// every conflicting block seen so far (blocks may nest, hence the max).
size_t lowest_free_offset(const Group& g, const std::vector<Group>& groups,
                          const std::vector<int>& placed, size_t alignment) {
  size_t candidate = 0;
  for (int p : placed) {
    const Group& other = groups[p];
    if (!lifetimes_overlap(g, other)) continue;
    if (candidate + g.size <= other.offset) break;
    candidate = std::max(candidate, align_up(other.offset + other.size, alignment));
  }
  return candidate;
}

// Greedy by size: fixed blocks where they are, then the largest blocks first (ties: earlier
// first_step, then lower index), each at the lowest free offset. Returns the arena size. Zero-size
// blocks take no bytes and stay at 0.
size_t place_groups(std::vector<Group>& groups, size_t alignment) {
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (groups[a].fixed != groups[b].fixed) return groups[a].fixed;
    if (groups[a].optional != groups[b].optional) return groups[b].optional;
    if (groups[a].size != groups[b].size) return groups[a].size > groups[b].size;
    return groups[a].first_step < groups[b].first_step;
  });
  std::vector<int> placed;  // non-empty groups placed so far, by increasing offset
  size_t arena_bytes = 0;
  for (int g : order) {
    Group& group = groups[g];
    if (group.size == 0) continue;
    if (group.fixed) {
      TRAINRT_CHECK(group.offset % alignment == 0, "buffer ", group.root, " has fixed offset ", group.offset,
                    ", not a multiple of ", alignment);
      for (int p : placed)
        TRAINRT_CHECK(!lifetimes_overlap(group, groups[p]) || !memory_overlaps(group, groups[p]), "buffers ",
                      group.root, " and ", groups[p].root, " have fixed offsets whose bytes overlap while both live");
    } else {
      group.offset = lowest_free_offset(group, groups, placed, alignment);
      if (group.optional && group.offset + group.size > arena_bytes) {  // would make the arena larger
        group.offset = kNoOffset;
        continue;
      }
    }
    arena_bytes = std::max(arena_bytes, group.offset + group.size);
    auto at = std::upper_bound(placed.begin(), placed.end(), group.offset,
                               [&](size_t offset, int p) { return offset < groups[p].offset; });
    placed.insert(at, g);
  }
  return arena_bytes;
}

// kReuse when the block covers bytes of a block that died before it was born, else kAllocate.
// Decided after placement: greedy by size places blocks out of schedule order.
AllocKind root_kind(const Group& g, const std::vector<Group>& groups) {
  for (const Group& other : groups) {
    if (other.size > 0 && other.offset != kNoOffset && other.last_step < g.first_step && memory_overlaps(g, other)) {
      return AllocKind::kReuse;
    }
  }
  return AllocKind::kAllocate;
}

}  // namespace

MemoryPlan plan_memory(std::span<const BufferSpec> buffers, size_t alignment) {
  TRAINRT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment ", alignment,
                " is not a power of two");
  Grouping grouping = group_buffers(buffers);
  MemoryPlan plan;
  plan.arena_bytes = place_groups(grouping.groups, alignment);
  plan.offsets.assign(buffers.size(), kNoOffset);
  plan.kinds.assign(buffers.size(), AllocKind::kPreexisting);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const int g = grouping.group_of[i];
    if (g == kNoGroup) continue;
    const Group& group = grouping.groups[g];
    if (group.offset == kNoOffset) {
      plan.kinds[i] = AllocKind::kNotPlaced;
      continue;
    }
    plan.offsets[i] = group.offset;
    plan.kinds[i] = group.root == static_cast<int>(i) ? root_kind(group, grouping.groups)
                                                      : AllocKind::kShare;
  }
  return plan;
}

size_t live_bytes_lower_bound(std::span<const BufferSpec> buffers) {
  // Sweep over lifetime boundaries: a group enters at first_step and leaves after last_step.
  // At equal steps departures sort before arrivals, so the running sum at each arrival is exactly
  // the bytes live at that step; the maximum is reached at some arrival.
  struct Event {
    int64_t step;
    bool arrives;
    size_t size;
  };
  std::vector<Event> events;
  for (const Group& g : group_buffers(buffers).groups) {
    if (g.optional) continue;  // never needs arena bytes
    events.push_back({g.first_step, true, g.size});
    events.push_back({int64_t{g.last_step} + 1, false, g.size});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.step != b.step ? a.step < b.step : a.arrives < b.arrives;
  });
  size_t live = 0, peak = 0;
  for (const Event& e : events) {
    live = e.arrives ? live + e.size : live - e.size;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace trainrt
