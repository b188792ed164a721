#include "trainrt/ir/attribute.h"

#include <sstream>

namespace trainrt {

Attribute Attribute::of_float(float v) {
  Attribute a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attribute Attribute::of_int(int64_t v) {
  Attribute a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attribute Attribute::of_string(std::string v) {
  Attribute a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::of_tensor(Tensor v) {
  Attribute a;
  a.kind = Kind::kTensor;
  a.t = std::move(v);
  return a;
}
Attribute Attribute::of_floats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::of_ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::of_strings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::kStrings;
  a.strings = std::move(v);
  return a;
}

std::string_view attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kFloat: return "float";
    case Attribute::Kind::kInt: return "int";
    case Attribute::Kind::kString: return "string";
    case Attribute::Kind::kTensor: return "tensor";
    case Attribute::Kind::kGraph: return "graph";
    case Attribute::Kind::kFloats: return "floats";
    case Attribute::Kind::kInts: return "ints";
    case Attribute::Kind::kStrings: return "strings";
  }
  return "?";
}

std::string to_string(const Attribute& a) {
  std::ostringstream out;
  auto list = [&](const auto& v) {
    out << "[";
    for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
    out << "]";
  };
  switch (a.kind) {
    case Attribute::Kind::kFloat: out << a.f; break;
    case Attribute::Kind::kInt: out << a.i; break;
    case Attribute::Kind::kString: out << '"' << a.s << '"'; break;
    case Attribute::Kind::kTensor: out << "tensor " << describe(a.t); break;
    case Attribute::Kind::kGraph: out << "graph"; break;
    case Attribute::Kind::kFloats: list(a.floats); break;
    case Attribute::Kind::kInts: list(a.ints); break;
    case Attribute::Kind::kStrings: list(a.strings); break;
  }
  return out.str();
}

}  // namespace trainrt
