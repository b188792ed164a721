// Node attributes: the typed constants attached to a node (ONNX AttributeProto semantics).
//
//   Attribute a = Attribute::of_ints({0, 2, 1});
//   node.set_attr("perm", a);
//   std::vector<int64_t> perm = node.attr_ints("perm", {});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/core/tensor.h"

namespace trainrt {

class Graph;

struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings };

  Kind kind = Kind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute of_float(float v);
  static Attribute of_int(int64_t v);
  static Attribute of_string(std::string v);
  static Attribute of_tensor(Tensor v);
  static Attribute of_floats(std::vector<float> v);
  static Attribute of_ints(std::vector<int64_t> v);
  static Attribute of_strings(std::vector<std::string> v);
};

std::string_view attribute_kind_name(Attribute::Kind k);
std::string to_string(const Attribute& a);  // short readable form for the printer

}  // namespace trainrt
