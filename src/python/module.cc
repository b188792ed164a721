// trainrt._C: the nanobind module. Thin: converts arrays and errors, calls the C++ engine.
#include <nanobind/nanobind.h>

#include "bindings.h"

NB_MODULE(_C, m) {
  m.doc() = "TrainRT engine (C++). Use the trainrt package, not this module directly.";
  trainrt::python::bind_errors(m);
  trainrt::python::bind_session(m);
  trainrt::python::bind_training(m);
  trainrt::python::bind_module_programs(m);
  trainrt::python::bind_optim(m);
}
