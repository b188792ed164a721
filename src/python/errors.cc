// Python exception classes mirroring the C++ hierarchy: trainrt.Error and its subclasses.
#include "bindings.h"
#include "trainrt/core/error.h"

namespace nb = nanobind;

namespace trainrt::python {

void bind_errors(nb::module_& m) {
  static nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static nb::exception<InvalidModel> invalid(m, "InvalidModel", error.ptr());
  static nb::exception<UnsupportedOp> unsupported(m, "UnsupportedOp", error.ptr());
  static nb::exception<ShapeError> shape(m, "ShapeError", error.ptr());
  static nb::exception<OutOfMemory> oom(m, "OutOfMemory", error.ptr());
  static nb::exception<InternalError> internal(m, "InternalError", error.ptr());
  // nanobind tries translators newest first: register the base last so subclasses win.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidModel& e) {
      PyErr_SetString(invalid.ptr(), e.what());
    } catch (const UnsupportedOp& e) {
      PyErr_SetString(unsupported.ptr(), e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(shape.ptr(), e.what());
    } catch (const OutOfMemory& e) {
      PyErr_SetString(oom.ptr(), e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
}

}  // namespace trainrt::python
