// trainrt._C: the nanobind module. Thin: converts arrays and errors, calls the C++ engine.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "trainrt/core/thread_budget.h"

NB_MODULE(_C, m) {
  m.doc() = "TrainRT engine (C++). Use the trainrt package, not this module directly.";
  // A training script's last loss keeps its autograd graph, and with it RTModule's engine programs,
  // alive until the interpreter exits; nanobind would report those as leaks on every run.
  nanobind::set_leak_warnings(false);
  trainrt::python::bind_errors(m);
  trainrt::python::bind_session(m);
  trainrt::python::bind_training(m);
  trainrt::python::bind_module_programs(m);
  trainrt::python::bind_optim(m);
  trainrt::python::bind_python_op(m);
  m.def("storage_bytes", [] {
    trainrt::StorageBytes b = trainrt::storage_bytes();
    nanobind::dict d;
    d["live"] = b.live;
    d["peak"] = b.peak;
    return d;
  }, "Engine tensor storage (owned tensors, arenas, optimizer state): bytes live now, and the peak since "
     "reset_storage_peak().");
  m.def("set_num_threads", &trainrt::set_thread_budget, nanobind::arg("n"),
        "Threads the engine's loops may use, the caller included (n <= 0: all the cores it may run on).");
  m.def("get_num_threads", &trainrt::thread_budget, "Threads the engine's loops may use now.");
  m.def("reset_storage_peak", &trainrt::reset_storage_peak, "Sets the storage_bytes() peak to the bytes live now.");
}
