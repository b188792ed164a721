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
// Kept outputs (ConsumedOutput::keep): the value is in fresh storage, as a returned output's, and
// the consumer may keep it (share it) after the call: no step touches it afterwards. That is how a
// gradient leaves the engine the moment it is final (RTModule hands it to torch's AccumulateGrad,
// so DDP's reducer starts its all-reduce while the backward goes on).
//
//   struct Print : OutputConsumer {
//     void consume(size_t output, const Tensor& value) override { std::cout << describe(value); }
//   } print;
//   session.run({x, w}, &print);   // SessionOptions::consumed_outputs = {{"dw", "w"}}
//
// Row blocks: a consumer that asks for them (row_block_bytes) gets a large output in blocks of rows
// (its first axis), each right after the kernel made it, while it is still in L2 rather than after
// the whole output went through L3 to memory. The session does so when the output's producer can
// compute a row range alone (KernelTable::add_row_ranges) and the output is consumed right after
// that step (no later reader, its hold input read for the last time before); the whole output is
// then never in memory, only one block. Any other output still comes whole, through consume().
#pragma once

#include <cstddef>
#include <cstdint>

#include "trainrt/core/error.h"
#include "trainrt/core/tensor.h"

namespace trainrt {

class OutputConsumer {
 public:
  virtual ~OutputConsumer() = default;
  // `output`: the index of the graph output (ModulePrograms: the wrt index). Called on the
  // thread that runs the session, in the order the values become final.
  virtual void consume(size_t output, const Tensor& value) = 0;
  // Bytes of a block of rows of `output` this consumer takes through consume_rows (0: whole only).
  // Asked when a plan is built; a plan is kept per answer.
  virtual size_t row_block_bytes(size_t /*output*/) const { return 0; }
  // Rows [row_begin, row_begin + rows.dim(0)) of `output`, in order, each block once, the last one
  // ending at the output's last row. Called only where row_block_bytes(output) > 0.
  virtual void consume_rows(size_t output, const Tensor& rows, int64_t row_begin) {
    throw InternalError(fmt("output consumer: rows from ", row_begin, " of output ", output, " (", describe(rows),
                            ") came in a block, but this consumer takes no row blocks"));
  }
};

}  // namespace trainrt
