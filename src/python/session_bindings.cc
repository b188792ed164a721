// trainrt._C.Session: run an ONNX model on numpy / DLPack arrays.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "trainrt/core/logging.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/verifier.h"
#include "trainrt/runtime/control_flow_kernels.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/runtime/session.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

std::shared_ptr<Graph> load_model(const nb::object& model) {
  if (nb::isinstance<nb::bytes>(model)) {
    nb::bytes b = nb::cast<nb::bytes>(model);
    return import_onnx_bytes(std::string_view(b.c_str(), b.size()));
  }
  return import_onnx(nb::cast<std::string>(nb::str(model)));
}

nb::list run(Session& s, const std::vector<AnyArray>& arrays, const std::vector<bool>& bf16) {
  std::vector<Tensor> inputs;
  std::vector<std::string> names = s.input_names();
  for (size_t i = 0; i < arrays.size(); ++i)
    inputs.push_back(tensor_from_array(arrays[i], i < names.size() ? names[i].c_str() : "extra input",
                                       i < bf16.size() && bf16[i]));
  std::vector<Tensor> outputs;
  {
    nb::gil_scoped_release release;
    outputs = s.run(inputs);
  }
  nb::list out;
  for (Tensor& t : outputs) out.append(array_from_tensor(std::move(t)));
  return out;
}

nb::dict memory_stats(const Session& s) {
  MemoryStats m = s.memory_stats();
  const PlanStats& p = s.last_stats();
  nb::dict d;
  d["planned_arena_bytes"] = m.planned_arena_bytes;
  d["arena_capacity"] = m.arena_capacity;
  d["peak_dynamic_bytes"] = m.peak_dynamic_bytes;
  d["live_lower_bound"] = m.live_lower_bound;
  d["output_bytes"] = m.output_bytes;
  d["steps"] = p.num_steps;
  d["folded"] = p.num_folded;
  d["inplace"] = p.num_inplace;
  d["reused"] = p.num_reused;
  d["dynamic"] = p.num_dynamic;
  return d;
}

}  // namespace

// (domain, op) pairs with both a schema and a CPU kernel: what the engine claims to run.
std::vector<std::pair<std::string, std::string>> supported_ops() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OpSchema* s : OpRegistry::global().all())
    if (runtime_kernel_table().supports(s->domain, s->name)) out.emplace_back(s->domain, s->name);
  return out;
}

void bind_session(nb::module_& m) {
  m.def("supported_ops", &supported_ops, "(domain, op) pairs the engine has schemas and kernels for.");
  m.def("reexport_onnx", [](const nb::object& model) {
        std::shared_ptr<Graph> g = load_model(model);
        verify(*g);
        std::string bytes = export_onnx_bytes(*g);
        return nb::bytes(bytes.data(), bytes.size());
      }, nb::arg("model"),
      "Imports a model with TrainRT's ONNX importer, verifies the graph and exports it again (bytes).");
  m.def("set_log_level", [](int level) { set_log_level(static_cast<LogLevel>(level)); });
  nb::class_<Session>(m, "Session")
      .def("__init__",
           [](Session* self, const nb::object& model, uint64_t seed, bool profile) {
             SessionOptions o;
             o.seed = seed;
             o.profile = profile;
             new (self) Session(load_model(model), o);
           },
           nb::arg("model"), nb::arg("seed") = 0, nb::arg("profile") = false,
           "Loads an ONNX model (a file path or serialized bytes).")
      .def("run", &run, nb::arg("inputs"), nb::arg("bf16") = std::vector<bool>{},
           "Runs the model; one array per graph input, in order (bf16[i]: input i is bfloat16 bits).")
      .def_prop_ro("output_dtypes", [](const Session& s) {
        std::vector<std::string> out;
        for (const Value* v : s.graph().outputs()) out.emplace_back(dtype_name(v->dtype));
        return out;
      })
      .def_prop_ro("input_names", &Session::input_names)
      .def_prop_ro("output_names", &Session::output_names)
      .def("memory_stats", &memory_stats)
      .def("profile_summary", [](Session& s, int top) { return s.profiler().summary(top); },
           nb::arg("top") = 0)
      .def("write_profile", [](Session& s, const std::string& path) { s.profiler().write_chrome_trace(path); });
}

}  // namespace trainrt::python
