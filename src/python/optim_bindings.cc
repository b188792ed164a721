// trainrt._C.adam_step / sgd_step / lamb_step: the fused multi-tensor optimizer steps (optim/adam.h,
// optim/sgd.h, optim/lamb.h) run in place on the caller's arrays, for trainrt.optim.FusedAdam /
// FusedSGD / FusedLamb.
//
// One call covers a whole parameter group: every parameter, gradient and state buffer crosses as a
// zero-copy DLPack view (torch tensors, numpy arrays), the engine's ParamSlots are built over those
// views and the step runs on the thread pool with the GIL released. The step counts live in the
// caller's 0-d f32 / f64 arrays (torch keeps state["step"] that way) and are incremented in place.
// A state buffer passed as None is created by the step (zeros, or torch.optim.SGD's first-step
// momentum buffer) and handed back as a DLPack capsule that owns engine memory (for torch.from_dlpack).
// bf16 arrays cross as DLPack bfloat16 (torch tensors); the parameter's dtype is that of its array.
//
//   options = _C.AdamOptions(); options.lr = 1e-3; options.mode = _C.WeightDecayMode.DECOUPLED
//   created = _C.adam_step(names, params, grads, steps, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
//                          options, grad_scale=1.0)   # created: [exp_avgs, exp_avg_sqs, max_...]
//
// unscale_and_norm / scale_grads serve trainrt.optim.FP16_Optimizer (optim/grad_ops.h): one pass
// over all gradients for the unscaled global norm and the inf/NaN check, and an in-place rescale.
//
//   norm, found_inf = _C.unscale_and_norm(names, grads, inv_scale)
//   _C.scale_grads(names, grads, inv_scale * clip)
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <span>

#include "bindings.h"
#include "trainrt/core/error.h"
#include "trainrt/optim/adam.h"
#include "trainrt/optim/grad_ops.h"
#include "trainrt/optim/lamb.h"
#include "trainrt/optim/sgd.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

// Engine views of one group's arrays and the slots over them. The vectors are sized once, before
// any slot refers into them.
struct GroupViews {
  std::vector<std::string> names;
  std::vector<Tensor> params, grads, steps;
  std::vector<OptimizerState> states;

  GroupViews(const std::vector<std::string>& param_names, const std::vector<AnyArray>& param_arrays,
             const std::vector<AnyArray>& grad_arrays, const std::vector<AnyArray>& step_arrays, bool with_steps)
      : names(param_names), states(param_arrays.size()) {
    const size_t n = param_arrays.size();
    if (names.size() != n || grad_arrays.size() != n || (with_steps && step_arrays.size() != n))
      throw ShapeError(fmt("optimizer step: ", n, " parameters but ", names.size(), " names, ", grad_arrays.size(),
                           " gradients and ", step_arrays.size(), " step counters"));
    for (size_t i = 0; i < n; ++i) {
      params.push_back(tensor_from_array(param_arrays[i], names[i].c_str()));
      grads.push_back(tensor_from_array(grad_arrays[i], names[i].c_str()));
      if (with_steps) {
        steps.push_back(tensor_from_array(step_arrays[i], names[i].c_str()));
        states[i].step = read_step(steps.back(), names[i]);
      }
    }
  }

  // Views of one kind of state buffer; None stays undefined (the step creates it).
  void bind_state(const std::vector<nb::object>& arrays, Tensor OptimizerState::*buffer, const char* what) {
    if (arrays.size() != states.size())
      throw ShapeError(fmt("optimizer step: ", states.size(), " parameters but ", arrays.size(), " ", what));
    for (size_t i = 0; i < arrays.size(); ++i)
      if (!arrays[i].is_none())
        states[i].*buffer = tensor_from_array(nb::cast<AnyArray>(arrays[i]), names[i].c_str());
  }

  std::vector<ParamSlot> slots() {
    std::vector<ParamSlot> out;
    out.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) out.push_back({names[i], params[i], grads[i], states[i]});
    return out;
  }

  // Writes the incremented step counts back into the caller's arrays.
  void write_steps() {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].dtype() == DType::kF32)
        *steps[i].data<float>() = static_cast<float>(states[i].step);
      else
        *steps[i].data<double>() = static_cast<double>(states[i].step);
    }
  }

  // The buffers the step created (those passed as None), as numpy arrays; None where the caller's
  // array was used.
  nb::list created(const std::vector<nb::object>& passed, Tensor OptimizerState::*buffer) {
    nb::list out;
    for (size_t i = 0; i < passed.size(); ++i) {
      Tensor& t = states[i].*buffer;
      out.append(passed[i].is_none() && t.defined() ? capsule_from_tensor(t) : nb::none());
    }
    return out;
  }

 private:
  static int64_t read_step(const Tensor& step, const std::string& name) {
    if (step.numel() != 1 || (step.dtype() != DType::kF32 && step.dtype() != DType::kF64))
      throw ShapeError(fmt("optimizer step: step counter of parameter '", name, "' is ", describe(step),
                           ", expected a one-element f32 or f64 tensor"));
    const double value = step.to_double(0);
    if (!(value >= 0) || value != std::floor(value) || value > 9.0e15)
      throw InvalidModel(fmt("optimizer step: step counter of parameter '", name, "' is ", value,
                             ", expected a non-negative integer"));
    return static_cast<int64_t>(value);
  }
};

// Engine views of gradients alone (for the grad-only calls, which read only slot.grad).
struct GradViews {
  std::vector<std::string> names;
  std::vector<Tensor> grads;
  std::vector<OptimizerState> states;

  GradViews(const std::vector<std::string>& grad_names, const std::vector<AnyArray>& grad_arrays)
      : names(grad_names), states(grad_arrays.size()) {
    if (names.size() != grad_arrays.size())
      throw ShapeError(fmt("gradient call: ", grad_arrays.size(), " gradients but ", names.size(), " names"));
    grads.reserve(grad_arrays.size());
    for (size_t i = 0; i < grad_arrays.size(); ++i) grads.push_back(tensor_from_array(grad_arrays[i], names[i].c_str()));
  }

  std::vector<ParamSlot> slots() {
    std::vector<ParamSlot> out;
    out.reserve(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) out.push_back({names[i], grads[i], grads[i], states[i]});
    return out;
  }
};

}  // namespace

void bind_optim(nb::module_& m) {
  nb::enum_<WeightDecayMode>(m, "WeightDecayMode")
      .value("L2", WeightDecayMode::kL2)
      .value("DECOUPLED", WeightDecayMode::kDecoupled)
      .value("HUGGING_FACE", WeightDecayMode::kHuggingFace);

  nb::class_<AdamOptions>(m, "AdamOptions")
      .def(nb::init<>())
      .def_rw("lr", &AdamOptions::lr)
      .def_rw("beta1", &AdamOptions::beta1)
      .def_rw("beta2", &AdamOptions::beta2)
      .def_rw("eps", &AdamOptions::eps)
      .def_rw("weight_decay", &AdamOptions::weight_decay)
      .def_rw("amsgrad", &AdamOptions::amsgrad)
      .def_rw("bias_correction", &AdamOptions::bias_correction)
      .def_rw("mode", &AdamOptions::mode);

  nb::class_<SgdOptions>(m, "SgdOptions")
      .def(nb::init<>())
      .def_rw("lr", &SgdOptions::lr)
      .def_rw("momentum", &SgdOptions::momentum)
      .def_rw("dampening", &SgdOptions::dampening)
      .def_rw("weight_decay", &SgdOptions::weight_decay)
      .def_rw("nesterov", &SgdOptions::nesterov)
      .def_rw("maximize", &SgdOptions::maximize);

  m.def(
      "adam_step",
      [](const std::vector<std::string>& names, const std::vector<AnyArray>& params,
         const std::vector<AnyArray>& grads, const std::vector<AnyArray>& steps,
         const std::vector<nb::object>& exp_avgs, const std::vector<nb::object>& exp_avg_sqs,
         const std::vector<nb::object>& max_exp_avg_sqs, const AdamOptions& options, float grad_scale) {
        GroupViews views(names, params, grads, steps, /*with_steps=*/true);
        views.bind_state(exp_avgs, &OptimizerState::exp_avg, "exp_avg buffers");
        views.bind_state(exp_avg_sqs, &OptimizerState::exp_avg_sq, "exp_avg_sq buffers");
        if (options.amsgrad)
          views.bind_state(max_exp_avg_sqs, &OptimizerState::max_exp_avg_sq, "max_exp_avg_sq buffers");
        {
          nb::gil_scoped_release release;
          adam_step(views.slots(), options, grad_scale);
        }
        views.write_steps();
        nb::list created;
        created.append(views.created(exp_avgs, &OptimizerState::exp_avg));
        created.append(views.created(exp_avg_sqs, &OptimizerState::exp_avg_sq));
        created.append(options.amsgrad ? nb::object(views.created(max_exp_avg_sqs, &OptimizerState::max_exp_avg_sq))
                                        : nb::object(nb::list()));
        return created;
      },
      nb::arg("names"), nb::arg("params"), nb::arg("grads"), nb::arg("steps"), nb::arg("exp_avgs"),
      nb::arg("exp_avg_sqs"), nb::arg("max_exp_avg_sqs"), nb::arg("options"), nb::arg("grad_scale") = 1.f,
      "One Adam step over a parameter group, in place. State buffers given as None are created and "
      "returned as [exp_avgs, exp_avg_sqs, max_exp_avg_sqs] (None where the given array was used).");

  nb::class_<LambOptions>(m, "LambOptions")
      .def(nb::init<>())
      .def_rw("lr", &LambOptions::lr)
      .def_rw("beta1", &LambOptions::beta1)
      .def_rw("beta2", &LambOptions::beta2)
      .def_rw("eps", &LambOptions::eps)
      .def_rw("weight_decay", &LambOptions::weight_decay)
      .def_rw("bias_correction", &LambOptions::bias_correction)
      .def_rw("adam_w_mode", &LambOptions::adam_w_mode)
      .def_rw("use_nvlamb", &LambOptions::use_nvlamb);

  m.def(
      "lamb_step",
      [](const std::vector<std::string>& names, const std::vector<AnyArray>& params,
         const std::vector<AnyArray>& grads, const std::vector<AnyArray>& steps,
         const std::vector<nb::object>& exp_avgs, const std::vector<nb::object>& exp_avg_sqs,
         const LambOptions& options, float grad_scale) {
        GroupViews views(names, params, grads, steps, /*with_steps=*/true);
        views.bind_state(exp_avgs, &OptimizerState::exp_avg, "exp_avg buffers");
        views.bind_state(exp_avg_sqs, &OptimizerState::exp_avg_sq, "exp_avg_sq buffers");
        {
          nb::gil_scoped_release release;
          lamb_step(views.slots(), options, grad_scale);
        }
        views.write_steps();
        nb::list created;
        created.append(views.created(exp_avgs, &OptimizerState::exp_avg));
        created.append(views.created(exp_avg_sqs, &OptimizerState::exp_avg_sq));
        return created;
      },
      nb::arg("names"), nb::arg("params"), nb::arg("grads"), nb::arg("steps"), nb::arg("exp_avgs"),
      nb::arg("exp_avg_sqs"), nb::arg("options"), nb::arg("grad_scale") = 1.f,
      "One LAMB step over a parameter group, in place (the global gradient clip folded into "
      "grad_scale by the caller). State buffers given as None are created and returned as "
      "[exp_avgs, exp_avg_sqs] (None where the given array was used).");

  m.def(
      "sgd_step",
      [](const std::vector<std::string>& names, const std::vector<AnyArray>& params,
         const std::vector<AnyArray>& grads, const std::vector<nb::object>& momentum_buffers,
         const SgdOptions& options, float grad_scale) {
        GroupViews views(names, params, grads, {}, /*with_steps=*/false);
        const bool use_momentum = options.momentum != 0;
        if (use_momentum) views.bind_state(momentum_buffers, &OptimizerState::momentum_buffer, "momentum buffers");
        {
          nb::gil_scoped_release release;
          sgd_step(views.slots(), options, grad_scale);
        }
        return use_momentum ? views.created(momentum_buffers, &OptimizerState::momentum_buffer) : nb::list();
      },
      nb::arg("names"), nb::arg("params"), nb::arg("grads"), nb::arg("momentum_buffers"), nb::arg("options"),
      nb::arg("grad_scale") = 1.f,
      "One SGD step over a parameter group, in place. With momentum, buffers given as None take "
      "torch's first step (buf = grad) and are returned (None where the given array was used).");

  m.def(
      "unscale_and_norm",
      [](const std::vector<std::string>& names, const std::vector<AnyArray>& grads, double inv_scale) {
        GradViews views(names, grads);
        GradNormCheck result;
        {
          nb::gil_scoped_release release;
          const std::vector<ParamSlot> slots = views.slots();
          result = unscaled_grad_norm(slots, inv_scale);
        }
        return std::make_pair(result.norm, result.found_inf);
      },
      nb::arg("names"), nb::arg("grads"), nb::arg("inv_scale"),
      "(norm, found_inf): the global L2 norm of the gradients times inv_scale and whether any element "
      "is inf or NaN, from one threaded pass over the gradients (f32, f16, bf16). The gradients are not "
      "changed.");

  m.def(
      "scale_grads",
      [](const std::vector<std::string>& names, const std::vector<AnyArray>& grads, float scale) {
        GradViews views(names, grads);
        nb::gil_scoped_release release;
        const std::vector<ParamSlot> slots = views.slots();
        scale_grads(slots, scale);
      },
      nb::arg("names"), nb::arg("grads"), nb::arg("scale"),
      "Multiplies every gradient by scale in place (f32), one threaded pass.");
}

}  // namespace trainrt::python
