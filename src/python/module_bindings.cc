// trainrt._C.ModulePrograms / ForwardState: the engine side of RTModule's autograd.Function.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/train/module_programs.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

std::vector<Tensor> to_tensors(const std::vector<AnyArray>& arrays, const char* what) {
  std::vector<Tensor> out;
  for (const AnyArray& a : arrays) out.push_back(tensor_from_array(a, what));
  return out;
}

nb::list to_arrays(std::vector<Tensor>& tensors) {
  nb::list out;
  for (Tensor& t : tensors) out.append(t.defined() ? array_from_tensor(std::move(t)) : nb::none());
  return out;
}

nb::bytes graph_bytes(const Graph& g) {
  std::string b = export_onnx_bytes(g);
  return nb::bytes(b.data(), b.size());
}

nb::dict memory(const MemoryStats& m) {
  nb::dict d;
  d["planned_arena_bytes"] = m.planned_arena_bytes;
  d["arena_capacity"] = m.arena_capacity;
  d["peak_dynamic_bytes"] = m.peak_dynamic_bytes;
  d["live_lower_bound"] = m.live_lower_bound;
  d["output_bytes"] = m.output_bytes;
  return d;
}

}  // namespace

void bind_module_programs(nb::module_& m) {
  nb::class_<ForwardState>(m, "ForwardState").def(nb::init<>());
  nb::class_<ModulePrograms>(m, "ModulePrograms")
      .def("__init__",
           [](ModulePrograms* self, nb::bytes model, const std::vector<std::string>& grad_outputs,
              const std::vector<std::string>& wrt, bool profile, bool optimize) {
             std::shared_ptr<Graph> g = import_onnx_bytes(std::string_view(model.c_str(), model.size()));
             new (self) ModulePrograms(std::move(g), grad_outputs, wrt, profile, optimize);
           },
           nb::arg("model"), nb::arg("grad_outputs"), nb::arg("wrt"), nb::arg("profile") = false,
           nb::arg("optimize") = true)
      .def("profile_summary", [](ModulePrograms& p, int top) {
        return "forward program:\n" + p.forward_profiler().summary(top) + "backward program:\n" +
               p.backward_profiler().summary(top);
      }, nb::arg("top") = 0, "Op types by total time in each program over the profiled steps.")
      .def("write_profile", [](ModulePrograms& p, const std::string& prefix) {
        p.forward_profiler().write_chrome_trace(prefix + "_forward.json");
        p.backward_profiler().write_chrome_trace(prefix + "_backward.json");
      }, nb::arg("prefix"), "Chrome traces <prefix>_forward.json and <prefix>_backward.json.")
      .def("forward",
           [](ModulePrograms& p, const std::vector<AnyArray>& inputs, ForwardState& state, uint64_t seed) {
             auto tensors = to_tensors(inputs, "forward input");
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = p.forward(tensors, state, seed);
             }
             return to_arrays(out);
           },
           nb::arg("inputs"), nb::arg("state"), nb::arg("seed"))
      .def("backward",
           [](ModulePrograms& p, ForwardState& state, const std::vector<nb::object>& grads) {
             std::vector<Tensor> tensors;
             for (const nb::object& g : grads)
               tensors.push_back(g.is_none() ? Tensor() : tensor_from_array(nb::cast<AnyArray>(g), "output gradient"));
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = p.backward(state, tensors);
             }
             return to_arrays(out);
           },
           nb::arg("state"), nb::arg("output_grads"))
      .def("infer",
           [](ModulePrograms& p, const std::vector<AnyArray>& inputs, uint64_t seed) {
             auto tensors = to_tensors(inputs, "input");
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = p.infer(tensors, seed);
             }
             return to_arrays(out);
           },
           nb::arg("inputs"), nb::arg("seed"))
      .def_prop_ro("unreached", &ModulePrograms::unreached)
      .def("forward_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.forward_graph()); })
      .def("backward_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.backward_graph()); })
      .def("training_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.joint_graph()); })
      .def("memory_stats", [](const ModulePrograms& p) {
        nb::dict d;
        d["forward"] = memory(p.forward_memory());
        d["backward"] = memory(p.backward_memory());
        return d;
      });
}

}  // namespace trainrt::python
