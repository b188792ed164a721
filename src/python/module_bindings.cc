// trainrt._C.ModulePrograms / ForwardState: the engine side of RTModule's autograd.Function; and
// OptimizerInBackward, the consumer through which its backward steps parameters as their gradients
// come (train/optimizer_in_backward.h; trainrt.optim's step_in_backward); and the hand-over of
// gradients to Python as each becomes final (RTModule gives them to torch's AccumulateGrad).
//
//   opt = _C.OptimizerInBackward()
//   opt.add_adam(wrt_index, name, param, step, exp_avg, exp_avg_sq, None, adam_options, grad_scale=1.0)
//   grads = programs.backward(state, output_grads, consumer=opt)   # None where opt stepped
//   grads = programs.backward(state, output_grads, handed_over=[0, 2], deliver=f)
//   # f(wrt_index, capsule) was called for 0 and 2 during the run, each as soon as final; None there
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/kernels/cpu/op_tuning.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ops/op_schema.h"
#include "trainrt/train/module_programs.h"
#include "trainrt/train/optimizer_in_backward.h"

namespace nb = nanobind;

namespace trainrt::python {
namespace {

std::vector<Tensor> to_tensors(const std::vector<AnyArray>& arrays, const char* what) {
  std::vector<Tensor> out;
  for (const AnyArray& a : arrays) out.push_back(tensor_from_array(a, what));
  return out;
}

nb::list to_capsules(std::vector<Tensor>& tensors) {
  nb::list out;
  for (Tensor& t : tensors) out.append(t.defined() ? capsule_from_tensor(std::move(t)) : nb::none());
  return out;
}

// The caller's state buffers as engine views; None stays undefined.
OptimizerState state_views(const std::string& name, const nb::object& exp_avg, const nb::object& exp_avg_sq,
                           const nb::object& max_exp_avg_sq, const nb::object& momentum_buffer) {
  auto view = [&](const nb::object& a) {
    return a.is_none() ? Tensor() : tensor_from_array(nb::cast<AnyArray>(a), name.c_str());
  };
  OptimizerState s;
  s.exp_avg = view(exp_avg);
  s.exp_avg_sq = view(exp_avg_sq);
  s.max_exp_avg_sq = view(max_exp_avg_sq);
  s.momentum_buffer = view(momentum_buffer);
  return s;
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

// Gradients to the step_in_backward optimizer (arena bytes, during the call) or, for the handed-over
// ones, to Python's deliver(wrt index, DLPack capsule of the gradient's own storage) -> bool, with the GIL
// taken only for that call. deliver returns False when the Python it ran raised: the Python side
// keeps that exception and re-raises it once the engine call has unwound; the run stops here.
class GradientHandoff : public OutputConsumer {
 public:
  GradientHandoff(OptimizerInBackward* optimizer, const std::vector<size_t>& handed_over, size_t num_wrt,
                  nb::object deliver)
      : optimizer_(optimizer), handed_(num_wrt, false), deliver_(std::move(deliver)) {
    for (size_t w : handed_over)
      if (w < num_wrt) handed_[w] = true;  // out of range: ModulePrograms::backward names it
  }
  void consume(size_t output, const Tensor& value) override {
    if (!handed(output)) return optimizer_->consume(output, value);
    nb::gil_scoped_acquire gil;
    if (!nb::cast<bool>(deliver_(output, capsule_from_tensor(value))))
      throw Error(fmt("the Python that took the gradient of wrt entry ", output, " raised (the exception reaches "
                      "the caller)"));
  }
  size_t row_block_bytes(size_t output) const override {
    return handed(output) || !optimizer_ ? 0 : optimizer_->row_block_bytes(output);
  }
  void consume_rows(size_t output, const Tensor& rows, int64_t row_begin) override {
    optimizer_->consume_rows(output, rows, row_begin);
  }

 private:
  bool handed(size_t output) const { return output < handed_.size() && handed_[output]; }
  OptimizerInBackward* optimizer_;
  std::vector<bool> handed_;
  nb::object deliver_;
};

}  // namespace

void bind_module_programs(nb::module_& m) {
  nb::class_<ForwardState>(m, "ForwardState")
      .def(nb::init<>())
      .def_ro("outputs_read", &ForwardState::outputs_read,
              "The model outputs (indices) whose bytes the backward reads: not to be written in place before it.");
  nb::class_<OptimizerInBackward>(m, "OptimizerInBackward")
      .def(nb::init<>())
      .def("add_adam",
           [](OptimizerInBackward& o, size_t index, std::string name, const AnyArray& param, const AnyArray& step,
              nb::object exp_avg, nb::object exp_avg_sq, nb::object max_exp_avg_sq, const AdamOptions& options,
              float grad_scale) {
             Tensor p = tensor_from_array(param, name.c_str()), s = tensor_from_array(step, name.c_str());
             OptimizerState state = state_views(name, exp_avg, exp_avg_sq, max_exp_avg_sq, nb::none());
             o.add_adam(index, std::move(name), std::move(p), std::move(s), std::move(state), options, grad_scale);
           },
           nb::arg("index"), nb::arg("name"), nb::arg("param"), nb::arg("step"), nb::arg("exp_avg"),
           nb::arg("exp_avg_sq"), nb::arg("max_exp_avg_sq").none(), nb::arg("options"), nb::arg("grad_scale") = 1.f)
      .def("add_sgd",
           [](OptimizerInBackward& o, size_t index, std::string name, const AnyArray& param, const AnyArray& step,
              nb::object momentum_buffer, const SgdOptions& options, float grad_scale) {
             Tensor p = tensor_from_array(param, name.c_str()), s = tensor_from_array(step, name.c_str());
             OptimizerState state = state_views(name, nb::none(), nb::none(), nb::none(), momentum_buffer);
             o.add_sgd(index, std::move(name), std::move(p), std::move(s), std::move(state), options, grad_scale);
           },
           nb::arg("index"), nb::arg("name"), nb::arg("param"), nb::arg("step"), nb::arg("momentum_buffer").none(),
           nb::arg("options"), nb::arg("grad_scale") = 1.f)
      .def("indices", &OptimizerInBackward::indices)
      .def("stepped", &OptimizerInBackward::stepped, nb::arg("index"))
      .def("momentum_buffer", [](const OptimizerInBackward& o, size_t index) -> nb::object {
        const Tensor& t = o.momentum_buffer(index);
        return t.defined() ? capsule_from_tensor(t) : nb::none();
      }, nb::arg("index"), "The momentum buffer the first SGD step created (engine memory), or None.");
  m.def("set_tuning_options", [](bool enabled, double max_ms, const std::string& results_path) {
    set_tuning_options({.enabled = enabled, .max_ms = max_ms, .results_path = results_path});
  }, nb::arg("enabled"), nb::arg("max_ms"), nb::arg("results_path"),
     "Op tuning for the whole process (kernels/cpu/op_tuning.h); a results file is read now when it exists.");
  m.def("tuned_choice", [](const std::string& key) { return tuned_choice(key).value_or(""); }, nb::arg("key"),
        "The tuning choice for a problem key, or '' (for tests and inspection).");
  m.def("codegen_stats", [] {
    const CodegenStats s = codegen_stats();
    nb::dict d;
    d["units_compiled"] = s.units_compiled;
    d["units_from_cache"] = s.units_from_cache;
    d["compile_seconds"] = s.compile_seconds;
    d["compiler"] = codegen_compiler();
    return d;
  }, "Generated kernels in this process: compiler runs, units loaded from the disk cache, seconds spent, compiler.");
  m.def("parse_memory_opt_config", [](const std::string& text) {
    nb::dict out;
    for (const auto& [pattern, choice] : parse_memory_opt_config(text)) out[pattern.c_str()] = nb::make_tuple(choice.on, choice.count);
    return out;
  }, nb::arg("text"), "pattern -> (recompute, count) of ORTModule's MEMORY_OPT_CONFIG format; InvalidModel names "
     "a malformed item.");
  nb::class_<ModulePrograms>(m, "ModulePrograms")
      .def("__init__",
           [](ModulePrograms* self, nb::bytes model, const std::vector<std::string>& grad_outputs,
              const std::vector<std::string>& wrt, bool profile, bool optimize,
              const std::map<std::string, int>& recompute_regions, const std::map<std::string, int>& layers,
              int memory_level, bool label_sparsity, const std::string& memory_config, bool padding_elimination,
              bool codegen, const std::string& codegen_cache_dir, const std::string& codegen_debug_dir) {
             std::optional<CodegenOptions> generated;
             if (codegen) generated = CodegenOptions{.cache_dir = codegen_cache_dir, .debug_dir = codegen_debug_dir};
             std::shared_ptr<Graph> g = import_onnx_bytes(std::string_view(model.c_str(), model.size()));
             new (self) ModulePrograms(std::move(g), grad_outputs, wrt, profile, optimize,
                                       {.checkpoint_regions = recompute_regions,
                                        .layers = layers,
                                        .level = memory_level,
                                        .config = parse_memory_opt_config(memory_config)},
                                       label_sparsity, padding_elimination, generated);
           },
           nb::arg("model"), nb::arg("grad_outputs"), nb::arg("wrt"), nb::arg("profile") = false,
           nb::arg("optimize") = true, nb::arg("recompute_regions") = std::map<std::string, int>{},
           nb::arg("layers") = std::map<std::string, int>{}, nb::arg("memory_level") = 0,
           nb::arg("label_sparsity") = true, nb::arg("memory_config") = "", nb::arg("padding_elimination") = false,
           nb::arg("codegen") = false, nb::arg("codegen_cache_dir") = "", nb::arg("codegen_debug_dir") = "",
           "recompute_regions: forward node name -> checkpoint region, recomputed in the backward; layers: "
           "forward node name -> repeated layer, which memory_level 1 or 2 recomputes (plan/layer_recompute.h); "
           "memory_config: ORTModule's MEMORY_OPT_CONFIG string (plan/recompute_subgraphs.h); codegen: elementwise "
           "chains as generated kernels, cached in codegen_cache_dir (empty: ~/.cache/trainrt/codegen), sources and "
           "subgraphs written to codegen_debug_dir when set (train/codegen_fusion.h).")
      .def_prop_ro("forward_pass_report", [](const ModulePrograms& p) {
        nb::list rows;
        for (const PassOutcome& o : p.forward_pass_report()) {
          nb::dict row;
          row["pass"] = o.pass;
          row["changed"] = o.changed;
          row["nodes_removed"] = o.nodes_removed;
          rows.append(row);
        }
        return rows;
      }, "Each forward graph pass in order: {pass, changed, nodes_removed}.")
      .def_prop_ro("forward_pass_summary", [](const ModulePrograms& p) { return describe(p.forward_pass_report()); },
                   "The forward passes' outcome in words (the start-up table's 'graph passes' row).")
      .def_prop_ro("recompute_patterns", [](const ModulePrograms& p) {
        nb::list rows;
        for (const RecomputePattern& r : p.recompute_patterns()) {
          nb::dict row;
          row["pattern"] = r.pattern;
          row["freed"] = r.freed;
          row["freed_bytes"] = r.freed_bytes;
          row["found"] = r.found;
          row["applied"] = r.applied;
          row["cheap"] = r.cheap;
          row["config"] = r.config;
          rows.append(row);
        }
        return rows;
      }, "The memory optimizer's recompute subgraphs, one dict per pattern (plan/recompute_subgraphs.h).")
      .def_prop_ro("layers_recomputed", &ModulePrograms::layers_recomputed)
      .def_prop_ro("sparse_losses", &ModulePrograms::sparse_losses)
      .def_prop_ro("last_row_counts",
                   [](const ModulePrograms& p) {
                     nb::list rows;
                     for (const auto& c : p.last_row_counts()) rows.append(nb::make_tuple(c.name, c.kept, c.of));
                     return rows;
                   },
                   "per row selection of the last forward: (name, rows kept, rows it selected from)")
      .def_prop_ro("padding_row_flops", &ModulePrograms::padding_row_flops,
                   "forward FLOPs of one token row in the products padding elimination moved")
      .def_prop_ro("row_selections", &ModulePrograms::row_selections,
                   "the forward inputs the sparse optimizers' row selection computes before each forward")
      .def_prop_ro("padding_elimination", &ModulePrograms::padding_elimination,
                   "what padding elimination did, or why it did not fire; empty when off")
      .def_prop_ro("nodes_recomputed", &ModulePrograms::nodes_recomputed)
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
             return to_capsules(out);
           },
           nb::arg("inputs"), nb::arg("state"), nb::arg("seed"))
      .def("backward",
           [](ModulePrograms& p, ForwardState& state, const std::vector<nb::object>& grads,
              OptimizerInBackward* optimizer, bool retain, const std::vector<size_t>& handed_over,
              nb::object deliver) {
             std::vector<Tensor> tensors;
             for (const nb::object& g : grads)
               tensors.push_back(g.is_none() ? Tensor() : tensor_from_array(nb::cast<AnyArray>(g), "output gradient"));
             if (!handed_over.empty() && deliver.is_none())
               throw InvalidModel(fmt("backward: ", handed_over.size(), " gradients to hand over, but no deliver"));
             GradientHandoff handoff(optimizer, handed_over, p.num_wrt(), std::move(deliver));
             GradientConsumers consumers{&handoff, optimizer ? optimizer->indices() : std::vector<size_t>{},
                                         handed_over};
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = p.backward(state, tensors, consumers, retain);
             }
             return to_capsules(out);
           },
           nb::arg("state"), nb::arg("output_grads"), nb::arg("consumer").none() = nb::none(),
           nb::arg("retain") = false, nb::arg("handed_over") = std::vector<size_t>{},
           nb::arg("deliver").none() = nb::none(),
           "Gradients per wrt entry; None for those `consumer` (an OptimizerInBackward) stepped during the run "
           "and for those in `handed_over`, given to deliver(wrt index, DLPack capsule) -> bool as each became final "
           "(False: the Python it ran raised). `retain` keeps the state for another backward (retain_graph).")
      .def("infer",
           [](ModulePrograms& p, const std::vector<AnyArray>& inputs, uint64_t seed) {
             auto tensors = to_tensors(inputs, "input");
             std::vector<Tensor> out;
             {
               nb::gil_scoped_release release;
               out = p.infer(tensors, seed);
             }
             return to_capsules(out);
           },
           nb::arg("inputs"), nb::arg("seed"))
      .def_prop_ro("unreached", &ModulePrograms::unreached)
      .def_prop_ro("draws_random", [](const ModulePrograms& p) {
        for (const Node* n : p.joint_graph().nodes())
          if (const OpSchema* s = OpRegistry::global().find(n->domain(), n->op_type()); s && !s->deterministic)
            return true;
        return false;
      }, "Whether a node is random (Dropout, attention with dropout): only then does a run need a fresh seed.")
      .def_prop_ro("inputs_read_by_backward", &ModulePrograms::inputs_read_by_backward,
                   "The forward inputs (indices) the backward reads in place.")
      .def("forward_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.forward_graph()); })
      .def("backward_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.backward_graph()); })
      .def("training_graph_onnx", [](const ModulePrograms& p) { return graph_bytes(p.joint_graph()); })
      .def("memory_stats", [](const ModulePrograms& p) {
        nb::dict d;
        d["forward"] = memory(p.forward_memory());
        d["forward"]["saved_bytes"] = p.saved_bytes();  // what its last forward saved for the backward
        d["forward"]["saved_in_arena_bytes"] = p.saved_in_arena_bytes();  // of which in the arena's idle bytes
        d["backward"] = memory(p.backward_memory());
        return d;
      });
}

}  // namespace trainrt::python
