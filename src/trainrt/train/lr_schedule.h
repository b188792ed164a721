// Learning-rate schedule: linear warm-up, then linear decay (the HF transformers
// get_linear_schedule_with_warmup shape), or a constant rate.
//
//   LrSchedule s{.warmup_steps = 100, .total_steps = 1000};
//   double lr = s.factor(step) * base_lr;     // step counts optimizer steps from 0
#pragma once

#include <algorithm>
#include <cstdint>

namespace trainrt {

struct LrSchedule {
  int64_t warmup_steps = 0;  // factor rises linearly from 1/warmup to 1 over these steps
  int64_t total_steps = 0;   // 0: no decay; else factor falls linearly to end_factor at this step
  double end_factor = 0.0;

  double factor(int64_t step) const {
    if (warmup_steps > 0 && step < warmup_steps) return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    if (total_steps <= warmup_steps) return 1.0;
    double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return 1.0 - (1.0 - end_factor) * std::clamp(progress, 0.0, 1.0);
  }
};

}  // namespace trainrt
