// CheckpointState: everything needed to resume training, and its file format.
//
// Use it to save parameters, optimizer state, the step and user properties, and to resume from
// them. save() replaces the file atomically (AtomicFileWriter): a crash or an error midway leaves
// the previous checkpoint intact. load() checks the whole file before it changes anything: a
// truncated, corrupt or foreign file throws InvalidModel naming the file and what is wrong, and
// the state keeps its old contents. Loaded tensors view one 64-byte-aligned buffer holding the
// file, so loading costs one read and no copies.
//
//   CheckpointState ckpt;
//   ckpt.parameters["fc.weight"] = weight;            // Tensor (any dtype)
//   ckpt.optimizer_states["fc.weight"] = adam_state;  // OptimizerState
//   ckpt.step = 1000;
//   ckpt.properties["lr"] = 3e-4;                     // int64, double or string
//   ckpt.save("run/step1000.ckpt");
//   CheckpointState resumed;
//   resumed.load("run/step1000.ckpt");
//
// File format, version 1 (integers little-endian):
//   0   char[8]  magic "TRTCKPT\0"
//   8   u32      format version = 1
//   12  u32      entry count
//   16  u64      end of the entry table (its first byte follows this 40-byte preamble)
//   24  u64      file size, trailer included
//   32  i64      step
//   40  entries, each:
//         u8  section: 1 parameter, 2 optimizer state, 3 property
//         u8  field: optimizer state 1 step, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq,
//             5 momentum_buffer; property 1 int64, 2 double, 3 string; parameter 0
//         u8  dtype as an ONNX TensorProto code (properties: INT64, DOUBLE, UINT8 for strings)
//         u8  rank
//         u32 name length
//         u64 data offset from the start of the file, a multiple of 64
//         u64 data length in bytes (numel * dtype size)
//         i64 dims[rank]
//         name bytes (the parameter's or property's name, UTF-8, no terminator)
//   data   every entry's bytes at its offset (zero padding between), in entry order
//   end-4  u32 CRC-32C of every byte before it
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>

#include "trainrt/core/tensor.h"
#include "trainrt/optim/optimizer_state.h"

namespace trainrt {

using PropertyValue = std::variant<int64_t, double, std::string>;

struct CheckpointState {
  std::map<std::string, Tensor> parameters;
  std::map<std::string, OptimizerState> optimizer_states;  // keyed by parameter name
  int64_t step = 0;
  std::map<std::string, PropertyValue> properties;

  // Writes the state to `path` atomically. Throws trainrt::Error naming the file on I/O failure
  // (the previous file at `path` is then unchanged), InvalidModel for an undefined tensor.
  void save(const std::filesystem::path& path) const;

  // Replaces this state with the checkpoint at `path`, or throws InvalidModel naming the file
  // and the problem and leaves this state as it was.
  void load(const std::filesystem::path& path);
};

}  // namespace trainrt
