// The kernel table's answer to "is there a kernel of this op for this dtype" (kernels/kernel.h),
// which the session's widening asks (runtime/bf16_widening.h): a kernel registered under a dtype
// set is missing for the dtypes outside it, and the CPU kernels that dispatch inside declare the
// sets they really take, so a bf16 / f16 node they would refuse when it runs is widened instead.
#include "trainrt/kernels/kernel.h"

#include <gtest/gtest.h>

#include "trainrt/kernels/cpu/cpu_kernels.h"

namespace trainrt {
namespace {

KernelFn make_nothing(const Node&) {
  return [](KernelContext&) {};
}

TEST(KernelTable, AKernelDeclaringF32AndF64IsMissingForBf16AndF16) {
  KernelTable t;
  t.add("", "CumSum", dtype_bit(DType::kF32) | dtype_bit(DType::kF64), make_nothing);
  EXPECT_NE(t.find("", "CumSum", DType::kF32), nullptr);
  EXPECT_NE(t.find("ai.onnx", "CumSum", DType::kF64), nullptr);
  EXPECT_EQ(t.find("", "CumSum", DType::kBF16), nullptr);
  EXPECT_EQ(t.find("", "CumSum", DType::kF16), nullptr);
  EXPECT_EQ(t.find("", "CumSum", DType::kI64), nullptr);
  EXPECT_EQ(t.find("", "CumSum", DType::kUndefined), nullptr);
  EXPECT_TRUE(t.supports("", "CumSum"));
  // A kernel for every dtype (kUndefined) still serves bf16.
  t.add("", "Reshape", DType::kUndefined, make_nothing);
  EXPECT_NE(t.find("", "Reshape", DType::kBF16), nullptr);
}

struct OpDtypes {
  std::string_view domain, op;
  bool bf16, f16;  // whether the CPU table runs the op on that dtype
};

// Kernels that dispatch on the dtype inside: their refusals of bf16 / f16 must show in the table.
TEST(CpuKernelTable, KernelsThatDispatchInsideAreFoundExactlyForThe16BitFloatsTheyRun) {
  const std::string_view trainrt = kTrainrtDomain;
  const OpDtypes ops[] = {
      {"", "CumSum", false, false},          {"", "DFT", false, false},
      {trainrt, "DFTGrad", false, false},    {trainrt, "PadGrad", false, false},
      {"", "Conv", true, false},             {trainrt, "ConvGrad", true, false},
      {"", "Resize", true, true},            {trainrt, "ResizeGrad", true, true},
      {"", "ScatterND", true, true},         {"", "ScatterElements", true, true},
      {"", "ReduceSum", true, true},         {"", "ArgMax", true, true},
      {"", "TopK", true, true},              {"", "Einsum", true, true},
      {"", "Range", true, true},             {"", "Pad", true, true},
  };
  const KernelTable& table = cpu_kernel_table();
  for (const OpDtypes& o : ops) {
    const std::string domain(o.domain), op(o.op);
    EXPECT_NE(table.find(domain, op, DType::kF32), nullptr) << op;
    EXPECT_EQ(table.find(domain, op, DType::kBF16) != nullptr, o.bf16) << op << " bf16";
    EXPECT_EQ(table.find(domain, op, DType::kF16) != nullptr, o.f16) << op << " f16";
  }
}

}  // namespace
}  // namespace trainrt
