// Internal to the gradient rules of the shape and data movement family: the rule file that
// register_tensor_gradients (register_gradients.h, defined in tensor_gradients.cc) also calls, and
// the helpers both files use to give a gradient its input's dims.
//
//   Value* x = ctx.input(0);
//   Value* dx = ctx.emit("Reshape", {ctx.output_grad(0), dims_of(ctx, x)});
//   ctx.set_input_grad(0, with_shape_of(dx, x));   // keeps x's symbolic dims on dx
#pragma once

#include "trainrt/ir/graph.h"

namespace trainrt {

class GradContext;
class GradientRegistry;

// select_gradients.cc: Concat, Split, Slice, Gather.
void register_select_gradients(GradientRegistry& r);

// x's dims as a 1-D i64 value: a constant when x's shape is static (inference then sees exact
// dims), else Shape(x).
Value* dims_of(GradContext& ctx, Value* x);

// Gives `grad`, computed with x's dims at run time, x's (possibly symbolic) shape, which inference
// cannot see through Shape(x). Returns grad.
Value* with_shape_of(Value* grad, const Value* x);

}  // namespace trainrt
