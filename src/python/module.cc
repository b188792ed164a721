// trainrt._C: the nanobind module. Thin: converts arrays and errors, calls the C++ engine.
#include <nanobind/nanobind.h>

#include "bindings.h"

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
}
