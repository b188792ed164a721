// Generated elementwise kernels against the unfused ops: random subgraphs (every op the generator
// writes, inputs broadcast in every way the walk knows) run fused and unfused through a Session
// give the same bits; the kernel without a generated function runs the body's ops; the disk
// cache keeps its files private and is not read when others may write to it; a missing compiler
// leaves the ops unfused.
#include "trainrt/kernels/codegen/fused_elementwise_kernel.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <random>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/codegen/compiler.h"
#include "trainrt/passes/pass_testing.h"
#include "trainrt/runtime/session.h"
#include "trainrt/train/codegen_fusion.h"

namespace trainrt {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;

// A private directory for one test's cache, removed after.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "trainrt-codegen-test-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// A bf16 tensor's values as f32 (exactly), or an f32 tensor's values rounded to bf16.
Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::kF32, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = bf16_to_f32(t.data<BFloat16>()[i].bits);
  return out;
}
Tensor as_bf16(const Tensor& t) {
  Tensor out = Tensor::empty(DType::kBF16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<BFloat16>()[i].bits = f32_to_bf16(t.data<float>()[i]);
  return out;
}

// Bits equal, or both NaN.
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dims(), b.dims()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  if (a.dtype() == DType::kBool) {
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
    return;
  }
  if (a.dtype() == DType::kBF16) return expect_same_bits(as_f32(a), as_f32(b), what);  // exact widening
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::bit_cast<uint32_t>(x) != std::bit_cast<uint32_t>(y) && !(x != x && y != y)) {
      if (first < 0) first = i;
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << what << ": first at " << first << ": " << a.data<float>()[std::max<int64_t>(first, 0)]
                       << " vs " << b.data<float>()[std::max<int64_t>(first, 0)];
}

// A random program of fusible ops over x (b, t, d) and inputs broadcast to it: r (b, t, 1),
// w (d), s (), m (b, 1, d) and a condition c (b, t, d). Built twice from one seed: once to run
// as it is, once fused.
std::shared_ptr<Graph> random_program(uint32_t seed, const std::vector<Dim>& lead, int64_t d, bool exact, DType t) {
  std::mt19937 rng(seed);
  auto g = trainrt::testing::graph_with_opsets();
  const Dim b = lead[0], s = lead[1];
  Value* x = g->add_input("x", t, Shape{{b, s, Dim(d)}});
  std::vector<Value*> broadcast = {g->add_input("r", t, Shape{{b, s, Dim(1)}}), g->add_input("w", t, Shape({d})),
                                   g->add_input("s", t, Shape(std::vector<Dim>{})),
                                   g->add_input("m", t, Shape{{b, Dim(1), Dim(d)}})};
  Value* c = g->add_input("c", DType::kBool, Shape{{b, s, Dim(d)}});
  std::vector<Value*> full = {x};
  auto pick = [&](const std::vector<Value*>& from) { return from[rng() % from.size()]; };
  auto add = [&](const std::string& op, std::vector<Value*> in, std::string_view domain = kOnnxDomain,
                 std::vector<std::pair<std::string, Attribute>> attrs = {}) {
    Node* n = g->add_node(op, in, {g->unique_name(op)}, domain);
    for (auto& [k, a] : attrs) n->set_attr(k, a);
    full.push_back(n->output(0));
  };
  // `exact`: the ops whose interpreted kernels leave the compiler nothing to contract into a fused
  // multiply-add (the others' polynomials may be, in the engine's own build).
  const std::vector<std::string> unary = exact ? std::vector<std::string>{"Neg", "Abs", "Relu", "Sqrt", "Reciprocal", "LeakyRelu"}
                                               : std::vector<std::string>{"Neg", "Abs", "Relu", "Exp", "Log", "Sqrt", "Reciprocal",
                                                                          "Sigmoid", "Tanh", "Erf", "LeakyRelu", "Gelu"};
  const std::vector<std::string> binary = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
  const std::vector<std::string> grads = exact ? std::vector<std::string>{"ReluGrad", "SigmoidGrad", "LeakyReluGrad"}
                                               : std::vector<std::string>{"ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "LeakyReluGrad"};
  auto cast = [&](Value* v, DType to) {
    Node* n = g->add_node("Cast", {v}, {g->unique_name("Cast")});
    n->set_attr("to", Attribute::of_int(to == DType::kBF16 ? 16 : 1));
    return n->output(0);
  };
  for (int k = 0; k < 10; ++k) {
    if (t == DType::kBF16 && rng() % 4 == 0) {  // autocast's way: to f32, an op there, back to bf16
      Value* wide = cast(pick(full), DType::kF32);
      Value* op = g->add_node(rng() % 2 ? "Abs" : "Neg", {wide}, {g->unique_name("wide")})->output(0);
      full.push_back(cast(op, DType::kBF16));
      continue;
    }
    switch (rng() % 6) {
      case 0: {
        const std::string u = unary[rng() % unary.size()];
        std::vector<std::pair<std::string, Attribute>> attrs;
        if (u == "Gelu" && rng() % 2) attrs.push_back({"approximate", Attribute::of_string("tanh")});
        if (u == "LeakyRelu") attrs.push_back({"alpha", Attribute::of_float(0.2f)});
        add(u, {pick(full)}, kOnnxDomain, attrs);
        break;
      }
      case 1:
      case 2: {
        Value* a = pick(full);
        Value* other = rng() % 2 ? pick(full) : pick(broadcast);
        if (rng() % 2) std::swap(a, other);
        add(binary[rng() % binary.size()], {a, other});
        break;
      }
      case 3: {
        const std::string op = grads[rng() % grads.size()];
        std::vector<std::pair<std::string, Attribute>> attrs;
        if (op == "GeluGrad" && rng() % 2) attrs.push_back({"approximate", Attribute::of_string("tanh")});
        add(op, {pick(full), pick(full)}, kTrainrtDomain, attrs);
        break;
      }
      case 4: {
        const float e[] = {2.f, 3.f, 0.5f, -1.f, 1.f, 1.7f};
        Value* exponent = g->add_initializer(g->unique_name("e"), Tensor::scalar<float>(e[rng() % (exact ? 5 : 6)]));
        add("Pow", {pick(full), exponent});
        break;
      }
      default:
        if (rng() % 2) add("Where", {c, pick(full), rng() % 2 ? pick(full) : pick(broadcast)});
        else add("Sum", {pick(full), pick(broadcast), pick(full)});
    }
  }
  g->add_output(full.back());
  g->add_output(full[full.size() / 2]);
  infer_graph_shapes(*g);
  return g;
}

std::vector<Tensor> program_inputs(int64_t b, int64_t t, int64_t d, uint32_t seed, DType type) {
  Tensor cond = Tensor::empty(DType::kBool, {b, t, d});
  for (int64_t i = 0; i < cond.numel(); ++i) static_cast<uint8_t*>(cond.raw())[i] = (i * 7 + seed) % 3 == 0;
  std::vector<Tensor> in = {random_tensor({b, t, d}, seed, -3.f, 3.f), random_tensor({b, t, 1}, seed + 1, 0.5f, 2.f),
                            random_tensor({d}, seed + 2), random_tensor({}, seed + 3), random_tensor({b, 1, d}, seed + 4)};
  if (type == DType::kBF16)
    for (Tensor& x : in) x = as_bf16(x);
  in.push_back(cond);
  return in;
}

// Runs random programs fused and unfused; `compare` checks each output.
template <typename Compare>
void check_random_programs(bool exact, DType type, Compare compare) {
  TempDir cache;
  const CodegenOptions options{.cache_dir = cache.path.string()};
  for (uint32_t seed = 1; seed <= 16; ++seed) {
    const int64_t d = seed > 12 ? 1 : 16;  // the last four: every value (b, t, 1), a norm's statistics
    const std::vector<Dim> lead = seed % 2 ? std::vector<Dim>{Dim(2), Dim(3)}
                                           : std::vector<Dim>{Dim::symbolic("batch"), Dim::symbolic("seq")};
    auto plain = random_program(seed, lead, d, exact, type);
    auto fused = random_program(seed, lead, d, exact, type);
    const PassOutcome outcome = fuse_elementwise_with_codegen({{fused.get(), {}}}, options)[0];
    ASSERT_TRUE(outcome.changed) << "seed " << seed;
    ASSERT_GT(trainrt::testing::count(*fused, "FusedElementwise"), 0);
    Session reference(plain), generated(fused);
    // Static programs run at their dims; symbolic ones at three signatures (a new walk each; runs
    // of 4096 split a row of 3 x 700 x 16).
    for (auto [b, t] : seed % 2 ? std::vector<std::pair<int64_t, int64_t>>{{2, 3}}
                                : std::vector<std::pair<int64_t, int64_t>>{{2, 5}, {1, 1}, {3, 700}}) {
      const std::vector<Tensor> in = program_inputs(b, t, d, seed, type);
      const std::vector<Tensor> want = reference.run(in), got = generated.run(in);
      for (size_t o = 0; o < want.size(); ++o)
        compare(got[o], want[o], "seed " + std::to_string(seed) + " output " + std::to_string(o));
    }
  }
}

TEST(FusedElementwise, RandomProgramsOfArithmeticGiveTheUnfusedBits) {
  check_random_programs(/*exact=*/true, DType::kF32, expect_same_bits);
}

// bf16: every op rounds its result to bf16 as the interpreted bf16 kernels do (Sum after each
// addition), and Casts to f32 and back are that rounding; the same bits.
TEST(FusedElementwise, RandomBf16ProgramsGiveTheUnfusedBits) {
  check_random_programs(/*exact=*/true, DType::kBF16, expect_same_bits);
}

// Exp, Tanh, GELU and friends: the same polynomials (vector_math.h), but the engine's build may
// contract some of their products and sums into fused multiply-adds, which the generated kernels
// never do (compiler.cc); the results then differ in the last bits.
TEST(FusedElementwise, RandomProgramsOfAllOpsAgreeWithinRounding) {
  check_random_programs(/*exact=*/false, DType::kF32, [](const Tensor& got, const Tensor& want, const std::string& what) {
    SCOPED_TRACE(what);
    trainrt::testing::expect_close(got, want, 1e-5, 1e-6);
  });
}

// A body the generator cannot write (Floor) runs its ops one by one, with the same results.
TEST(FusedElementwise, WithoutAGeneratedFunctionTheBodyOpsRun) {
  auto body = trainrt::testing::graph_with_opsets();
  Value* bx = body->add_input("x0", DType::kF32, Shape({4, 5}));
  Value* bw = body->add_input("x1", DType::kF32, Shape({5}));
  Value* f = body->add_node("Floor", {bx}, {"f"})->output(0);
  body->add_output(body->add_node("Mul", {f, bw}, {"y"})->output(0));
  infer_graph_shapes(*body);

  auto g = trainrt::testing::graph_with_opsets();
  Value* x = g->add_input("x", DType::kF32, Shape({4, 5}));
  Value* w = g->add_input("w", DType::kF32, Shape({5}));
  Node* n = g->add_node("FusedElementwise", {x, w}, {"y"}, kTrainrtDomain);
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = body;
  n->set_attr("body", a);
  g->add_output(n->output(0));
  const Tensor in = random_tensor({4, 5}, 3, -4.f, 4.f), weights = random_tensor({5}, 4);
  const Tensor y = Session(g).run({in, weights})[0];
  for (int64_t i = 0; i < 20; ++i)
    EXPECT_EQ(y.data<float>()[i], std::floor(in.data<float>()[i]) * weights.data<float>()[i % 5]);
}

// A body with a constant no other test uses, so its function is new to this process.
GeneratedFunction fresh_function(float constant) {
  auto body = trainrt::testing::graph_with_opsets();
  Value* x = body->add_input("x0", DType::kF32, Shape({4}));
  Value* k = body->add_initializer("k", Tensor::scalar<float>(constant));
  Value* y = body->add_node("Add", {body->add_node("Exp", {x}, {"e"})->output(0), k}, {"y"})->output(0);
  body->add_output(y);
  infer_graph_shapes(*body);
  std::string why;
  std::optional<GeneratedFunction> f = elementwise_function(*body, &why);
  EXPECT_TRUE(f.has_value()) << why;
  return *f;
}

TEST(Codegen, TheDiskCacheIsPrivateAndSkipsADirectoryOthersMayWrite) {
  TempDir root;
  const fs::path cache = root.path / "cache";
  const GeneratedFunction f = fresh_function(static_cast<float>(::getpid() % 1000) + 0.25f);
  ASSERT_TRUE(compile_kernels({f}, {.cache_dir = cache.string()})[0]);
  ASSERT_NE(find_kernel(f.symbol), nullptr);
  struct stat st;
  ASSERT_EQ(::stat(cache.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int objects = 0;
  for (const auto& e : fs::directory_iterator(cache)) {
    objects += e.path().extension() == ".so";
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 022, 0u) << e.path();
  }
  EXPECT_EQ(objects, 1);

  const fs::path shared = root.path / "shared";
  fs::create_directories(shared);
  ::chmod(shared.c_str(), 0777);
  const GeneratedFunction g = fresh_function(static_cast<float>(::getpid() % 1000) + 0.5f);
  ASSERT_TRUE(compile_kernels({g}, {.cache_dir = shared.string()})[0]);  // compiled elsewhere, and loaded
  EXPECT_TRUE(fs::is_empty(shared));
}

TEST(Codegen, AMissingCompilerLeavesTheFunctionUncompiled) {
  const GeneratedFunction f = fresh_function(static_cast<float>(::getpid() % 1000) + 0.75f);
  TempDir cache;
  EXPECT_FALSE(compile_kernels({f}, {.cache_dir = cache.path.string(), .compiler = "/nonexistent/trainrt-c++"})[0]);
  EXPECT_EQ(find_kernel(f.symbol), nullptr);
}

}  // namespace
}  // namespace trainrt
