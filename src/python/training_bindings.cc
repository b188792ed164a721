// trainrt._C.TrainingSession: the C++ training API (train/eval/optimizer steps, LR, checkpoints,
// inference export) for Python, on numpy / DLPack arrays.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/train/loss_builder.h"
#include "trainrt/train/training_session.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

std::vector<Tensor> to_tensors(const TrainingSession& s, const std::vector<AnyArray>& arrays) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const auto& inputs = s.graph().inputs();
    out.push_back(tensor_from_array(arrays[i], i < inputs.size() ? inputs[i]->name.c_str() : "extra input"));
  }
  return out;
}

std::unique_ptr<TrainingSession> make_session(const nb::object& model, const std::string& loss,
                                              const std::string& append, const std::string& output,
                                              const std::string& label, const std::string& optimizer,
                                              double lr, std::optional<double> weight_decay, double momentum,
                                              double max_grad_norm, int64_t warmup, int64_t total,
                                              const std::vector<std::string>& frozen, uint64_t seed, bool codegen) {
  std::shared_ptr<Graph> graph;
  if (nb::isinstance<nb::bytes>(model)) {
    nb::bytes b = nb::cast<nb::bytes>(model);
    graph = import_onnx_bytes(std::string_view(b.c_str(), b.size()));
  } else {
    graph = import_onnx(nb::cast<std::string>(nb::str(model)));
  }
  TrainingConfig config;
  config.loss = loss;
  if (!append.empty()) {
    if (output.empty() || label.empty()) throw InvalidModel("append_loss needs output= and label=");
    config.loss = append_loss(*graph, parse_loss_kind(append), output, label);
  }
  config.frozen = frozen;
  config.seed = seed;
  if (codegen) config.codegen = CodegenOptions{};
  if (optimizer == "sgd") {
    config.optimizer.kind = OptimizerKind::kSgd;
    config.optimizer.sgd.lr = lr;
    config.optimizer.sgd.momentum = momentum;
    config.optimizer.sgd.weight_decay = weight_decay.value_or(0.0);
  } else if (optimizer == "adamw" || optimizer == "adam") {
    config.optimizer.kind = OptimizerKind::kAdam;
    config.optimizer.adam = optimizer == "adamw" ? AdamOptions::adamw() : AdamOptions{};
    config.optimizer.adam.lr = lr;
    if (weight_decay) config.optimizer.adam.weight_decay = *weight_decay;
  } else {
    throw InvalidModel(fmt("unknown optimizer '", optimizer, "'; choose sgd, adam or adamw"));
  }
  config.optimizer.max_grad_norm = max_grad_norm;
  config.schedule.warmup_steps = warmup;
  config.schedule.total_steps = total;
  return std::make_unique<TrainingSession>(graph, config);
}

}  // namespace

void bind_training(nb::module_& m) {
  nb::class_<TrainingSession>(m, "TrainingSession")
      .def("__init__",
           [](TrainingSession* self, const nb::object& model, const std::string& loss, const std::string& append,
              const std::string& output, const std::string& label, const std::string& optimizer, double lr,
              std::optional<double> weight_decay, double momentum, double max_grad_norm, int64_t warmup,
              int64_t total, const std::vector<std::string>& frozen, uint64_t seed, bool codegen) {
             auto s = make_session(model, loss, append, output, label, optimizer, lr, weight_decay, momentum,
                                   max_grad_norm, warmup, total, frozen, seed, codegen);
             new (self) TrainingSession(std::move(*s));
           },
           nb::arg("model"), nb::arg("loss") = "", nb::arg("append_loss") = "", nb::arg("output") = "",
           nb::arg("label") = "", nb::arg("optimizer") = "adamw", nb::arg("lr") = 1e-3,
           nb::arg("weight_decay") = nb::none(), nb::arg("momentum") = 0.0, nb::arg("max_grad_norm") = 0.0,
           nb::arg("warmup_steps") = 0, nb::arg("total_steps") = 0,
           nb::arg("frozen") = std::vector<std::string>{}, nb::arg("seed") = 0, nb::arg("codegen") = false)
      .def("train_step",
           [](TrainingSession& s, const std::vector<AnyArray>& inputs) {
             auto tensors = to_tensors(s, inputs);
             nb::gil_scoped_release release;
             return s.train_step(tensors);
           },
           nb::arg("inputs"), "Forward and backward on one micro-batch; returns the loss.")
      .def("eval_step",
           [](TrainingSession& s, const std::vector<AnyArray>& inputs) {
             auto tensors = to_tensors(s, inputs);
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = s.eval_step(tensors);
             }
             nb::list result;
             for (Tensor& t : out) result.append(array_from_tensor(std::move(t)));
             return result;
           },
           nb::arg("inputs"))
      .def("optimizer_step", &TrainingSession::optimizer_step, nb::call_guard<nb::gil_scoped_release>())
      .def("reset_grad", &TrainingSession::reset_grad)
      .def_prop_rw("learning_rate", &TrainingSession::learning_rate, &TrainingSession::set_learning_rate)
      .def_prop_ro("step", &TrainingSession::step)
      .def_prop_ro("parameter_names", &TrainingSession::parameter_names)
      .def("parameter", [](const TrainingSession& s, const std::string& name) {
        return array_from_tensor(s.parameter(name).clone());
      }, "A copy of a trainable parameter's current value.")
      .def("gradient", [](const TrainingSession& s, const std::string& name) {
        return array_from_tensor(s.gradient(name).clone());
      }, "A copy of a parameter's gradient accumulated since the last optimizer step.")
      .def("save_checkpoint", [](const TrainingSession& s, const std::string& path) { s.checkpoint().save(path); })
      .def("load_checkpoint", [](TrainingSession& s, const std::string& path) {
        CheckpointState state;
        state.load(path);
        s.load_checkpoint(state);
      })
      .def("export_inference_model", [](const TrainingSession& s, const std::string& path,
                                        const std::vector<std::string>& outputs) {
        s.export_inference_model(path, outputs);
      }, nb::arg("path"), nb::arg("outputs"));
}

}  // namespace trainrt::python
