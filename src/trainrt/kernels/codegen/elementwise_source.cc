#include "trainrt/kernels/codegen/elementwise_source.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "trainrt/core/error.h"

namespace trainrt {

extern const char kVectorMathText[];  // vector_math.h, embedded at configure time (CMakeLists.txt)

namespace {

// An f32 literal that reads back to the same bits.
std::string float_literal(float v) {
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(v));
  return buf;
}

// Writes one body node's expression over its operands (C++ names of f32 or bool values); empty
// when the op is not one this generator writes.
class Emitter {
 public:
  std::string expression(const Node& n, const std::vector<std::string>& a, std::string* why) const {
    const std::string& op = n.op_type();
    if (n.domain() == kOnnxDomain) {
      if (op == "Add") return "(" + a[0] + " + " + a[1] + ")";
      if (op == "Sub") return "(" + a[0] + " - " + a[1] + ")";
      if (op == "Mul") return "(" + a[0] + " * " + a[1] + ")";
      if (op == "Div") return "(" + a[0] + " / " + a[1] + ")";
      if (op == "Max") return "(((" + a[0] + " > " + a[1] + ") | (" + a[0] + " != " + a[0] + ")) ? " + a[0] + " : " + a[1] + ")";
      if (op == "Min") return "(((" + a[0] + " < " + a[1] + ") | (" + a[0] + " != " + a[0] + ")) ? " + a[0] + " : " + a[1] + ")";
      if (op == "Sum") {  // a left fold, as the variadic kernel: ((x0 + x1) + x2) ..., each sum stored (rounded)
        const bool bf16 = n.output(0)->dtype == DType::kBF16;
        std::string s = a[0];
        for (size_t i = 1; i < a.size(); ++i)
          s = (bf16 && i + 1 < a.size() ? "bf16_round(" : "(") + s + " + " + a[i] + ")";
        return s;
      }
      if (op == "Cast") return a[0];  // f32 <-> bf16: the output's rounding is the cast
      if (op == "Neg") return "(-" + a[0] + ")";
      if (op == "Abs") return "abs_f32(" + a[0] + ")";
      if (op == "Relu") return "(" + a[0] + " < 0.f ? 0.f : " + a[0] + ")";
      if (op == "Exp") return "exp_f32(" + a[0] + ")";
      if (op == "Log") return "log_f32(" + a[0] + ")";
      if (op == "Sqrt") return "__builtin_sqrtf(" + a[0] + ")";
      if (op == "Reciprocal") return "(1.f / " + a[0] + ")";
      if (op == "Sigmoid") return "sigmoid_f32(" + a[0] + ")";
      if (op == "Tanh") return "tanh_f32(" + a[0] + ")";
      if (op == "Erf") return "erf_f32(" + a[0] + ")";
      if (op == "LeakyRelu") {
        const std::string alpha = float_literal(n.attr_float("alpha", 0.01f));
        return "select_f32(" + a[0] + " < 0.f, " + alpha + " * " + a[0] + ", " + a[0] + ")";
      }
      if (op == "Gelu") return (n.attr_string("approximate", "none") == "tanh" ? "gelu_tanh_f32(" : "gelu_f32(") + a[0] + ")";
      if (op == "Where") return "select_f32(" + a[0] + ", " + a[1] + ", " + a[2] + ")";
      if (op == "Not") return "(!" + a[0] + ")";
      if (op == "Pow") return pow(n, a[0], why);
    } else if (n.domain() == kTrainrtDomain) {
      if (op == "ReluGrad") return "select_f32(" + a[1] + " <= 0.f, 0.f, " + a[0] + ")";
      if (op == "SigmoidGrad") return "(" + a[0] + " * (1.f - " + a[1] + ") * " + a[1] + ")";
      if (op == "TanhGrad") return "(" + a[0] + " * (1.f - " + a[1] + " * " + a[1] + "))";
      if (op == "LeakyReluGrad") {
        const std::string alpha = float_literal(n.attr_float("alpha", 0.01f));
        return "select_f32(" + a[1] + " > 0.f, " + a[0] + ", " + a[0] + " * " + alpha + ")";
      }
      if (op == "GeluGrad")
        return (n.attr_string("approximate", "none") == "tanh" ? "gelu_tanh_grad_f32(" : "gelu_grad_f32(") + a[0] +
               ", " + a[1] + ")";
    }
    *why = fmt(n.describe(), ": not an op the elementwise generator writes");
    return "";
  }

 private:
  // Pow with a constant exponent e, as the Pow kernel's fast paths (binary_kernels.cc).
  static std::string pow(const Node& n, const std::string& x, std::string* why) {
    const Value* exponent = n.input(1);
    if (!exponent || !exponent->is_initializer() || exponent->data.numel() != 1) {
      *why = fmt(n.describe(), ": the exponent is not a constant scalar");
      return "";
    }
    const double e = exponent->data.to_double(0);
    if (e == 2) return "(" + x + " * " + x + ")";
    if (e == 3) return "(" + x + " * " + x + " * " + x + ")";
    if (e == 0.5)
      return "(" + x + " == -__builtin_inff() ? __builtin_inff() : __builtin_sqrtf(" + x + "))";
    if (e == -1) return "(1.f / " + x + ")";
    if (e == 1) return x;
    return "__builtin_powf(" + x + ", " + float_literal(static_cast<float>(e)) + ")";
  }
};

const char* c_type(DType t) { return t == DType::kBool ? "unsigned char" : t == DType::kBF16 ? "uint16_t" : "float"; }
bool is_written(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kBool; }

}  // namespace

std::string stable_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

const std::string& kernel_prelude() {
  // bf16 as the engine stores it (core/dtype_convert.cc): a load widens exactly, a store rounds
  // to nearest even (NaN stays a quiet NaN); bf16_round is a store and a load, what an op with a
  // bf16 output does to its f32 result.
  static const std::string prelude = std::string("#include <cstdint>\n") + kVectorMathText + R"(
using namespace trainrt;
[[gnu::always_inline]] inline float bf16_load(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
[[gnu::always_inline]] inline uint16_t bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  const uint32_t mask = 0u - static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  return static_cast<uint16_t>((nan & mask) | (rounded & ~mask));
}
[[gnu::always_inline]] inline float bf16_round(float f) { return bf16_load(bf16_bits(f)); }
)";
  return prelude;
}

std::optional<GeneratedFunction> elementwise_function(const Graph& body, std::string* why) {
  std::map<const Value*, std::string> name;
  std::ostringstream loads, stores, ptrs, math;
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const Value* v = body.inputs()[i];
    if (!is_written(v->dtype)) {
      *why = fmt("body input ", i, " has dtype ", dtype_name(v->dtype), ": the generator writes f32, bf16 and bool");
      return std::nullopt;
    }
    ptrs << "  const " << c_type(v->dtype) << "* __restrict x" << i << " = static_cast<const " << c_type(v->dtype)
         << "*>(in[" << i << "]);\n";
    const std::string value = "v" + std::to_string(name.size());
    const std::string load = v->dtype == DType::kBool   ? "x" + std::to_string(i) + "[i] != 0"
                             : v->dtype == DType::kBF16 ? "bf16_load(x" + std::to_string(i) + "[i])"
                                                        : "x" + std::to_string(i) + "[i]";
    loads << "    const " << (v->dtype == DType::kBool ? "bool " : "float ") << value << " = " << load << ";\n";
    name[v] = value;
  }
  for (const Value* v : body.initializers()) {
    if ((v->dtype != DType::kF32 && v->dtype != DType::kBF16) || v->data.numel() != 1) continue;  // Pow's: pow()
    name[v] = float_literal(static_cast<float>(v->data.to_double(0)));
  }
  const Emitter emitter;
  for (const Node* n : body.topological_order()) {
    std::vector<std::string> operands;
    for (const Value* in : n->inputs()) {
      auto it = name.find(in);
      operands.push_back(it == name.end() ? "" : it->second);
    }
    const std::string e = emitter.expression(*n, operands, why);
    if (e.empty()) return std::nullopt;
    for (size_t k = 0; k < operands.size(); ++k)
      if (operands[k].empty() && !(n->op_type() == "Pow" && k == 1)) {
        *why = fmt(n->describe(), ": input ", k, " is not a body value");
        return std::nullopt;
      }
    const Value* out = n->output(0);
    if (!is_written(out->dtype)) {
      *why = fmt(n->describe(), ": output dtype ", dtype_name(out->dtype), " is not one the generator writes");
      return std::nullopt;
    }
    const std::string value = "v" + std::to_string(name.size());
    math << "    const " << (out->dtype == DType::kBool ? "bool " : "float ") << value << " = "
         << (out->dtype == DType::kBF16 ? "bf16_round(" + e + ")" : e) << ";\n";
    name[out] = value;
  }
  for (size_t j = 0; j < body.outputs().size(); ++j) {
    const Value* v = body.outputs()[j];
    ptrs << "  " << c_type(v->dtype) << "* __restrict y" << j << " = static_cast<" << c_type(v->dtype) << "*>(out[" << j
         << "]);\n";
    stores << "    y" << j << "[i] = "
           << (v->dtype == DType::kBool ? "static_cast<unsigned char>(" : v->dtype == DType::kBF16 ? "bf16_bits(" : "(")
           << name.at(v) << ");\n";
  }
  std::ostringstream text;
  text << "(const void* const* in, void* const* out, int64_t n) {\n"
       << ptrs.str() << "#pragma GCC ivdep\n  for (int64_t i = 0; i < n; ++i) {\n"
       << loads.str() << math.str() << stores.str() << "  }\n}\n";
  GeneratedFunction f;
  f.symbol = "trainrt_ew_" + stable_hash(text.str());
  f.source = "extern \"C\" void " + f.symbol + text.str();
  return f;
}

}  // namespace trainrt
