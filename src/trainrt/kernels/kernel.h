// The kernel interface and the explicit kernel table: (domain, op, dtype) -> kernel factory.
//
// A factory runs once per node when a plan is built: it reads and checks the node's attributes
// and returns the function that runs the node. Outputs arrive allocated with their final dims
// (the executor sized them from shape inference); a kernel only computes. Inputs that are
// omitted optional inputs are null. An output buffer may alias an input buffer only where the
// op's schema lists that pair as in-place.
//
// A kernel registered with add_row_ranges() may also be asked for rows [row_begin, row_end) of its
// output 0 alone (its first axis): out(0) then holds only those rows, and the kernel computes them
// as the whole run would (same values, up to the library's rounding). A session uses it to hand a large output to an
// OutputConsumer block by block while each block is still in cache (runtime/output_consumer.h).
//
//   KernelFn make_relu(const Node&) {
//     return [](KernelContext& ctx) { relu(ctx.in(0), ctx.out(0)); };
//   }
//   table.add("", "Relu", DType::kF32, make_relu);
//
// A kernel that dispatches on the element type inside registers under the set of dtypes it takes,
// so that find() answers no for the others: a bf16 / f16 node whose kernel does not take that dtype
// then runs in f32 between casts (runtime/bf16_widening.h) instead of failing when it runs.
//
//   table.add("", "DFT", dtype_bit(DType::kF32) | dtype_bit(DType::kF64), make_dft);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>

#include "trainrt/core/tensor.h"
#include "trainrt/core/thread_pool.h"
#include "trainrt/ir/graph.h"

namespace trainrt {

// A set of DTypes as a bit mask, for the dtypes a kernel takes.
using DTypeSet = uint32_t;
constexpr DTypeSet dtype_bit(DType t) { return DTypeSet{1} << static_cast<unsigned>(t); }
inline constexpr DTypeSet kFloatTypes =
    dtype_bit(DType::kF32) | dtype_bit(DType::kF16) | dtype_bit(DType::kBF16) | dtype_bit(DType::kF64);
inline constexpr DTypeSet kSignedIntTypes =
    dtype_bit(DType::kI64) | dtype_bit(DType::kI32) | dtype_bit(DType::kI8);
inline constexpr DTypeSet kSignedTypes = kFloatTypes | kSignedIntTypes;
inline constexpr DTypeSet kNumericTypes = kSignedTypes | dtype_bit(DType::kU8);
inline constexpr DTypeSet kIntegerTypes = kSignedIntTypes | dtype_bit(DType::kU8);
inline constexpr DTypeSet kBoolTypes = dtype_bit(DType::kBool);
inline constexpr DTypeSet kAllTypes = kNumericTypes | kBoolTypes;

template <typename T>
constexpr bool dtype_in(DTypeSet set) {
  return (set & dtype_bit(dtype_of<T>())) != 0;
}

struct KernelContext {
  std::span<const Tensor* const> inputs;
  std::span<Tensor* const> outputs;
  ThreadPool* pool = nullptr;
  // Fresh for every run of every node: seeds random ops (Dropout) so a session seed makes runs
  // reproducible while two runs, or two nodes, never draw the same stream.
  uint64_t random_seed = 0;
  // Rows [row_begin, row_end) of output 0 only (row_end < 0: the whole output); set only for a
  // kernel registered with KernelTable::add_row_ranges.
  int64_t row_begin = 0;
  int64_t row_end = -1;

  bool whole_output() const { return row_end < 0; }

  bool has_in(int i) const { return i < static_cast<int>(inputs.size()) && inputs[i] != nullptr; }
  const Tensor& in(int i) const { return *inputs[static_cast<size_t>(i)]; }
  bool has_out(int i) const { return i < static_cast<int>(outputs.size()) && outputs[i] != nullptr; }
  Tensor& out(int i) const { return *outputs[static_cast<size_t>(i)]; }
  ThreadPool& threads() const { return pool ? *pool : ThreadPool::global(); }
};

using KernelFn = std::function<void(KernelContext&)>;
using KernelFactory = KernelFn (*)(const Node&);

class KernelTable {
 public:
  // Kernels are keyed on the dtype of the node's first input (its first output for ops with no
  // inputs). DType::kUndefined registers a kernel for every dtype, undefined included: only for
  // kernels that never look at the element type (views, byte copies, shapes, host callbacks).
  void add(std::string_view domain, std::string_view op, DType dtype, KernelFactory factory);
  // Registers `factory` under every dtype of `dtypes`. The set holds the dtypes the kernel runs; it
  // may still refuse one of them for some attribute values (Resize's linear mode on integers), but
  // never a bf16 / f16 one, which would then fail instead of being widened.
  void add(std::string_view domain, std::string_view op, DTypeSet dtypes, KernelFactory factory);
  const KernelFactory* find(const std::string& domain, const std::string& op, DType dtype) const;
  // Finds the kernel for a node whose input/output dtypes are known; throws UnsupportedOp naming
  // the node, op and dtype when there is none.
  KernelFn create(const Node& node) const;
  bool supports(const std::string& domain, const std::string& op) const;
  // Declares that the kernel of (domain, op, dtype) computes any row range of its output 0 on its
  // own (KernelContext::row_begin / row_end); computes_row_ranges asks it for a node.
  void add_row_ranges(std::string_view domain, std::string_view op, DType dtype);
  bool computes_row_ranges(const Node& node) const;
  static DType key_dtype(const Node& node);

 private:
  std::map<std::tuple<std::string, std::string, DType>, KernelFactory> factories_;
  std::set<std::tuple<std::string, std::string, DType>> row_ranges_;
};

}  // namespace trainrt
