// The kernels of PythonOp and PythonOpGrad (ops/python_op_schemas.cc): a user's
// torch.autograd.Function run by its own Python, forward and backward, inside the engine's programs.
//
// The engine never includes Python. This file, in the binding layer, adds the two kernels to the
// CPU kernel table (kernels/cpu/host_kernels.h) when trainrt._C is imported, and trainrt.python_op
// hands it the two Python callbacks (set_python_op_callbacks). A kernel takes the GIL only while it
// calls back (the engine calls release it). Inputs cross as zero-copy DLPack capsules of engine memory, valid
// during the call; the callback copies what the Function keeps (trainrt/python_op.py). Outputs are
// copied into the buffers the plan sized from the capture's shapes, after a check that names the
// Function, the output and both shapes.
//
//   forward(call_id, [x_0 .. x_{N-1}]) -> (ctx handle, [y_1 .. y_M])
//   backward(handle, [dy_1 .. dy_M] (None where no gradient)) -> [dx_0 .. dx_{N-1}] (None: zeros)
//
// Either callback returns None when the user's code raised: the Python side keeps that exception
// and re-raises it to the caller once the engine call has unwound; the kernel throws Error so the
// run stops (the engine stays usable: a run holds no state across calls).
#include <cstring>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "trainrt/core/error.h"
#include "trainrt/kernels/cpu/host_kernels.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

struct Callbacks {
  nb::object forward, backward;
};

// Leaked on purpose: destroying Python objects at exit, after the interpreter, would crash.
Callbacks& callbacks() {
  static auto* c = new Callbacks();
  return *c;
}

nb::list input_views(const KernelContext& ctx, size_t begin, size_t end) {
  nb::list views;
  for (size_t i = begin; i < end; ++i)
    views.append(ctx.has_in(static_cast<int>(i)) ? capsule_from_tensor(ctx.in(static_cast<int>(i))) : nb::none());
  return views;
}

// Copies `value` (a DLPack capsule, or a torch tensor) into `out` after checking dtype and dims.
// `array` owns a capsule's tensor once cast (its deleter frees it), so it lives until the copy is done.
void copy_result(const nb::handle& value, Tensor& out, const std::string& name, const char* what, size_t index) {
  const std::string where = fmt("Function ", name, " ", what, " ", index);
  const AnyArray array = nb::cast<AnyArray>(value);
  Tensor t = tensor_from_array(array, where.c_str());
  if (t.dtype() != out.dtype() || t.dims() != out.dims())
    throw ShapeError(fmt(where, " is ", dtype_name(t.dtype()), " ", to_string(t.dims()), ", expected ",
                         dtype_name(out.dtype()), " ", to_string(out.dims())));
  if (t.nbytes()) std::memcpy(out.raw(), t.raw(), t.nbytes());
}

[[noreturn]] void raised(const std::string& name, const char* part) {
  throw Error(fmt("Function ", name, ": its ", part, " raised (the exception reaches the caller)"));
}

KernelFn make_python_op(const Node& node) {
  const int64_t call_id = node.attr_int("call_id", -1);
  const std::string name = node.attr_string("function", "?");
  if (call_id < 0) throw InvalidModel(fmt(node.describe(), ": PythonOp without a call_id attribute"));
  return [call_id, name](KernelContext& ctx) {
    nb::gil_scoped_acquire gil;
    if (!callbacks().forward.is_valid()) throw InvalidModel(fmt("Function ", name, ": PythonOp needs trainrt's Python front end"));
    nb::object result = callbacks().forward(call_id, input_views(ctx, 0, ctx.inputs.size()));
    if (result.is_none()) raised(name, "forward");
    auto pair = nb::cast<nb::tuple>(result);
    ctx.out(0).data<int64_t>()[0] = nb::cast<int64_t>(pair[0]);
    auto outputs = nb::cast<nb::list>(pair[1]);
    if (outputs.size() + 1 != ctx.outputs.size())
      throw ShapeError(fmt("Function ", name, " returned ", outputs.size(), " tensors, the capture saw ",
                           ctx.outputs.size() - 1));
    for (size_t j = 0; j < outputs.size(); ++j)
      if (ctx.has_out(static_cast<int>(j + 1))) copy_result(outputs[j], ctx.out(static_cast<int>(j + 1)), name, "output", j);
  };
}

KernelFn make_python_op_grad(const Node& node) {
  const std::string name = node.attr_string("function", "?");
  const size_t num_grads = static_cast<size_t>(node.attr_int("num_output_grads", 0));
  return [name, num_grads](KernelContext& ctx) {
    nb::gil_scoped_acquire gil;
    if (!callbacks().backward.is_valid()) throw InvalidModel(fmt("Function ", name, ": PythonOpGrad needs trainrt's Python front end"));
    const int64_t handle = ctx.in(0).data<int64_t>()[0];
    nb::object result = callbacks().backward(handle, input_views(ctx, 1, std::min(1 + num_grads, ctx.inputs.size())));
    if (result.is_none()) raised(name, "backward");
    auto grads = nb::cast<nb::list>(result);
    if (grads.size() != ctx.outputs.size())
      throw ShapeError(fmt("Function ", name, ": backward returned ", grads.size(), " gradients for ",
                           ctx.outputs.size(), " inputs"));
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!ctx.has_out(static_cast<int>(i))) continue;
      Tensor& out = ctx.out(static_cast<int>(i));
      if (grads[i].is_none()) {
        if (out.nbytes()) std::memset(out.raw(), 0, out.nbytes());
      } else {
        copy_result(grads[i], out, name, "gradient of input", i);
      }
    }
  };
}

}  // namespace

void bind_python_op(nb::module_& m) {
  add_host_kernel(kTrainrtDomain, "PythonOp", DType::kUndefined, make_python_op);
  add_host_kernel(kTrainrtDomain, "PythonOpGrad", DType::kUndefined, make_python_op_grad);
  m.def("set_python_op_callbacks", [](nb::object forward, nb::object backward) {
    callbacks().forward = std::move(forward);
    callbacks().backward = std::move(backward);
  }, nb::arg("forward"), nb::arg("backward"), "The Python that runs PythonOp / PythonOpGrad (trainrt.python_op).");
}

}  // namespace trainrt::python
