#include "trainrt/plan/lifetimes.h"

#include "trainrt/core/error.h"

namespace trainrt {

std::vector<Lifetime> compute_lifetimes(std::span<const StepUses> steps, int num_buffers,
                                        std::span<const int> outliving) {
  TRAINRT_CHECK(num_buffers >= 0, "num_buffers is ", num_buffers);
  std::vector<Lifetime> lifetimes(static_cast<size_t>(num_buffers));
  // Steps come in execution order, so the first touch is the first step and the latest the last.
  auto touch = [&](int buffer, int step, const char* how) {
    TRAINRT_CHECK(0 <= buffer && buffer < num_buffers, how, " buffer ", buffer, " at step ", step,
                  ", but there are ", num_buffers, " buffers");
    Lifetime& life = lifetimes[static_cast<size_t>(buffer)];
    if (life.first_step == kNeverUsed) life.first_step = step;
    life.last_step = step;
  };
  for (size_t s = 0; s < steps.size(); ++s) {
    const int step = static_cast<int>(s);
    for (int buffer : steps[s].reads) touch(buffer, step, "read of");
    for (int buffer : steps[s].writes) touch(buffer, step, "write of");
  }
  const int past_end = static_cast<int>(steps.size());
  for (int buffer : outliving) touch(buffer, past_end, "outliving");
  return lifetimes;
}

}  // namespace trainrt
