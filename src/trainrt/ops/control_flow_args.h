// ONNX If, Loop and Scan: how a node's inputs and outputs map onto its body's, shared by their
// schemas (output types from the body's inference) and their kernels (runtime/control_flow_kernels.h),
// so both read a node the same way. Implicit inputs are the enclosing values the bodies read
// (ir/control_flow.h): every body takes them last, in the node's order.
//
// If(cond, implicit...) -> outputs of then_branch or else_branch (both take implicit... only).
// Loop(M?, cond?, v_initial[N], implicit...) -> (v_final[N], scans[K])
//   body(iter_num i64 [], cond bool [], v[N], implicit...) -> (cond, v[N], scan_slices[K]); each
//   scan output stacks its slices along a new axis 0, one per iteration run (ONNX Loop-16).
// Scan (opset >= 9): Scan(states[N], scan_inputs[M], implicit...) -> (final_states[N], scans[K])
//   body(states[N], slices[M], implicit...) -> (states[N], scan_slices[K]); slice t of input m is
//   index t (or L-1-t, reversed) along scan_input_axes[m]; scan output k stacks its slices along
//   scan_output_axes[k] (prepended in reverse order for a reversed direction).
// Scan-8 has a leading batch axis on every state, input and output and an optional sequence_lens
// input first: each batch row is scanned on its own.
//
//   ScanSignature s = scan_signature(node);  // s.states, s.scan_inputs, s.scan_outputs
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainrt/ir/graph.h"

namespace trainrt {

// The node's graph attribute `name`; throws InvalidModel naming the node when it is missing.
const Graph& body_of(const Node& node, const char* name);

struct LoopSignature {
  size_t carried = 0;       // N: loop-carried values
  size_t scan_outputs = 0;  // K
  size_t implicit = 0;      // I
};
// Checks the body's inputs and outputs against the node's; throws ShapeError naming the node.
LoopSignature loop_signature(const Node& node);

struct ScanSignature {
  bool batched = false;     // Scan-8: axis 0 of every state, input and output is a batch axis
  size_t first_state = 0;   // 1 for Scan-8 (after sequence_lens), else 0
  size_t states = 0;        // N
  size_t scan_inputs = 0;   // M
  size_t scan_outputs = 0;  // K
  size_t implicit = 0;      // I
  std::vector<int64_t> input_axes, output_axes;    // as given (may be negative), per input / output
  std::vector<bool> input_reverse, output_reverse;
};
ScanSignature scan_signature(const Node& node);

}  // namespace trainrt
