// The one error model of TrainRT: a small typed exception hierarchy.
//
// Every error says what was wrong and where: the file, node, op, input and shapes involved.
// Library code never aborts the process; it throws one of these and leaves state intact.
// Python sees matching exception classes (trainrt.InvalidModel, ...).
//
//   throw ShapeError(fmt("node '", node.name(), "' (", node.op_type(), "): input 1 has shape ",
//                        to_string(shape), ", expected rank 2"));
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace trainrt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The model (file, bytes or graph) is malformed or inconsistent.
class InvalidModel : public Error {
 public:
  using Error::Error;
};
// An op (or an op with these types/attributes) has no schema, kernel or gradient here.
class UnsupportedOp : public Error {
 public:
  using Error::Error;
};
// Shapes or dtypes do not fit what an op or a session expects.
class ShapeError : public Error {
 public:
  using Error::Error;
};
// An allocation failed or would exceed a limit.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};
// A broken invariant inside TrainRT: a bug in TrainRT, not in the user's input.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Concatenates anything streamable into one message: fmt("node ", name, " has ", n, " inputs").
template <typename... Args>
std::string fmt(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// Runs fn(); an error of the model's or the user's (InvalidModel, UnsupportedOp, ShapeError) is
// rethrown, same type, with `where` and ": " in front: a body's error names the node that ran it.
template <typename Fn>
decltype(auto) with_error_context(const std::string& where, Fn&& fn) {
  try {
    return fn();
  } catch (const InvalidModel& e) {
    throw InvalidModel(fmt(where, ": ", e.what()));
  } catch (const UnsupportedOp& e) {
    throw UnsupportedOp(fmt(where, ": ", e.what()));
  } catch (const ShapeError& e) {
    throw ShapeError(fmt(where, ": ", e.what()));
  }
}

}  // namespace trainrt

// Checks an internal invariant; a failure is a TrainRT bug and throws InternalError.
#define TRAINRT_CHECK(cond, ...)                                                             \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw ::trainrt::InternalError(::trainrt::fmt(__FILE__, ":", __LINE__, ": check '" #cond \
                                                    "' failed. ", ##__VA_ARGS__));           \
  } while (0)
