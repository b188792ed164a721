// Einsum's equation (ONNX Einsum-12, numpy.einsum's notation), parsed once the operands' ranks are
// known, for its schema (output dims), its CPU kernel and its gradient rule.
//
//   "bij,bjk->bik"   batched matrix product       "ij->ji"  transpose
//   "...ii->...i"    diagonal of each matrix       "i,i"     inner product (implicit output: the
//                                                            labels used once, alphabetically)
// Each operand axis gets a label id: letters first (a-z, A-Z as ids 0..51), then one id per
// ellipsis dim, right-aligned across operands (an operand with fewer ellipsis dims broadcasts over
// the leading ones, size 1 broadcasting as numpy does). Spaces are ignored.
//
//   EinsumEquation e = parse_einsum(node.describe(), "bij,bjk->bik", {3, 3});
//   e.operands[1] == {1, 9, 10}, e.output == {1, 8, 10}   // b=1, i=8, j=9, k=10
//   to_equation(e, e.operands, e.output) == "bij,bjk->bik"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrt {

struct EinsumEquation {
  std::vector<std::vector<int>> operands;  // per operand, per axis: its label
  std::vector<int> output;                 // the output's labels, in order
  int num_labels = 0;                      // labels are 0 .. num_labels - 1
  std::vector<bool> ellipsis_label;        // per label: an ellipsis dim (size 1 may broadcast)
};

// Throws InvalidModel prefixed with `where` for a malformed equation or one whose operand terms do
// not fit `ranks` (one per operand).
EinsumEquation parse_einsum(const std::string& where, const std::string& equation, const std::vector<int64_t>& ranks);

// An equation over e's labels, for the Einsum nodes a rule emits: letters, and "..." for each term's
// run of ellipsis labels (a run must be contiguous and end with the last ellipsis dim; the output's
// covers them all), so the ellipsis dims broadcast as in e.
std::string to_equation(const EinsumEquation& e, const std::vector<std::vector<int>>& operands,
                        const std::vector<int>& output);

// Each label's size from the operands' dims (-1: not known); a mismatch throws ShapeError.
std::vector<int64_t> label_sizes(const std::string& where, const EinsumEquation& e,
                                 const std::vector<std::vector<int64_t>>& dims);

}  // namespace trainrt
