// Gradient rule of DFT (ops/dft_args.h). The transform is linear in X's real and imaginary
// parts, so its gradient is its transpose: the conjugate transform of dY, scaled the same, back
// to X's rows (zero past N, real part only for a real X), one DFTGrad node.
//   DFT(X, [dft_length], [axis])   dX = DFTGrad(dY, dims(X), [dft_length], [axis]), DFT's inverse
//                                  and onesided, and its axis attribute as DFT read it
#include "trainrt/autodiff/grad_context.h"
#include "trainrt/autodiff/register_gradients.h"
#include "trainrt/autodiff/tensor_gradients.h"
#include "trainrt/ops/tensor_op_args.h"

namespace trainrt {
namespace {

void dft_grad(GradContext& ctx) {
  const Node& n = ctx.node();
  const bool before_20 = opset_below(n, 20);
  auto input = [&](int i) { return i < n.num_inputs() ? n.input(i) : nullptr; };
  std::vector<Value*> inputs = {ctx.output_grad(0), dims_of(ctx, ctx.input(0)), input(1),
                                before_20 ? nullptr : input(2)};
  while (inputs.back() == nullptr) inputs.pop_back();
  std::map<std::string, Attribute> attrs{
      {"axis", Attribute::of_int(before_20 ? n.attr_int("axis", 1) : -2)},
      {"inverse", Attribute::of_int(n.attr_int("inverse", 0))},
      {"onesided", Attribute::of_int(n.attr_int("onesided", 0))}};
  Value* dx = ctx.emit("DFTGrad", inputs, attrs, kTrainrtDomain);
  ctx.set_input_grad(0, with_shape_of(dx, ctx.input(0)));
}

}  // namespace

void register_spectral_gradients(GradientRegistry& r) { r.add("", "DFT", dft_grad); }

}  // namespace trainrt
