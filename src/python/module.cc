#include <nanobind/nanobind.h>

NB_MODULE(_C, m) { m.doc() = "TrainRT engine"; }
