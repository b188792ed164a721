// OutputConsumer: receives graph outputs in the middle of a run, as soon as each is final.
//
// Use it when an output is used once and right away (a gradient an optimizer applies during the
// backward, as torch's "optimizer in backward" does with post-accumulate-grad hooks): the session
// calls consume() right after the step that makes the output final and after the last reader of
// its hold input (PlanOptions::consumed_outputs), while the value is still in cache. A consumed
// output lives in the arena, so the next value reuses its bytes; run() returns an empty tensor in
// its place. The tensor passed to consume() is valid only during the call; the consumer may write
// the hold input (no step reads it afterwards), and nothing else the run reads.
//
//   struct Print : OutputConsumer {
//     void consume(size_t output, const Tensor& value) override { std::cout << describe(value); }
//   } print;
//   session.run({x, w}, &print);   // SessionOptions::consumed_outputs = {{"dw", "w"}}
#pragma once

#include <cstddef>

#include "trainrt/core/tensor.h"

namespace trainrt {

class OutputConsumer {
 public:
  virtual ~OutputConsumer() = default;
  // `output`: the index of the graph output (ModulePrograms: the wrt index). Called on the
  // thread that runs the session, in the order the values become final.
  virtual void consume(size_t output, const Tensor& value) = 0;
};

}  // namespace trainrt
