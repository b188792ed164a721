// libFuzzer target: ONNX import must survive any bytes, and whatever imports must export.
//
// Any bytes either import or throw InvalidModel / UnsupportedOp. A model that imports must export,
// import again, and export to the same bytes (export -> import -> export is a fixed point). Any
// other outcome (a crash, a sanitizer report, another exception, a mismatch) is a finding.
// Build and run: `make fuzz`, or the commands in fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<trainrt::Graph> graph;
  try {
    graph = trainrt::import_onnx_bytes(bytes);
  } catch (const trainrt::InvalidModel&) {
    return 0;
  } catch (const trainrt::UnsupportedOp&) {
    return 0;
  }
  trainrt::print_graph(*graph);
  std::string exported = trainrt::export_onnx_bytes(*graph);
  std::unique_ptr<trainrt::Graph> again = trainrt::import_onnx_bytes(exported);
  if (trainrt::export_onnx_bytes(*again) != exported) __builtin_trap();
  return 0;
}
