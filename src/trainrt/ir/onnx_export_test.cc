#include "trainrt/ir/onnx_export.h"

#include <gtest/gtest.h>

#include <fstream>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;
namespace fs = std::filesystem;

// A graph with every feature export must carry: symbolic and unknown dims, an input with a default,
// initializers of several dtypes, attributes of every kind, omitted optional inputs and outputs,
// a custom domain, and nodes inserted out of schedule order.
std::unique_ptr<Graph> rich_graph() {
  auto g = std::make_unique<Graph>();
  g->name = "rich";
  g->doc = "a test graph";
  g->set_opset("", 17);
  g->set_opset("com.trainrt", 1);
  Value* x = g->add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), 4}});
  Value* scale = g->add_input("scale", DType::kF32, Shape{{1}});
  scale->data = make_tensor<float>({1}, {2.f});
  Value* flags = g->add_input("flags", DType::kBool, Shape::unknown_rank());
  Value* w = g->add_initializer("w", random_tensor({4, 3}, 7));
  Value* shape = g->add_initializer("shape", Tensor::from_i64({-1, 3}));
  Value* half = g->add_initializer("half", make_tensor<Half>({2}, {{0x3c00}, {0x4000}}));
  Value* h = g->add_value("h");
  Value* act = g->add_value("act");
  // The Relu is added before the MatMul that feeds it.
  g->add_node_with_outputs("Relu", {h}, {act}, kOnnxDomain, "relu");
  Node* mm = g->add_node_with_outputs("MatMul", {x, w}, {h}, kOnnxDomain, "mm");
  h->dtype = DType::kF32;
  h->shape = Shape{{Dim::symbolic("batch"), 3}};
  Node* mul = g->add_node("Mul", {act, scale}, {"scaled"}, kOnnxDomain, "mul");
  Node* reshape = g->add_node("Reshape", {mul->output(0), shape}, {"r"}, kOnnxDomain, "reshape");
  Node* drop = g->add_node("Dropout", {reshape->output(0), nullptr, flags}, {"d", ""}, kOnnxDomain, "drop");
  Node* custom = g->add_node("BiasGelu", {drop->output(0), half}, {"y"}, kTrainrtDomain, "gelu");
  custom->set_attr("f", Attribute::of_float(0.5f));
  custom->set_attr("i", Attribute::of_int(-2));
  custom->set_attr("s", Attribute::of_string("tanh"));
  custom->set_attr("t", Attribute::of_tensor(make_tensor<int64_t>({2}, {4, 5})));
  custom->set_attr("fs", Attribute::of_floats({1.f, 2.f}));
  custom->set_attr("is", Attribute::of_ints({3, 4}));
  custom->set_attr("ss", Attribute::of_strings({"a", "b"}));
  mm->set_attr("unused", Attribute::of_ints({}));
  g->add_output(custom->output(0));
  g->add_output(h);
  return g;
}

TEST(OnnxExport, RoundTripKeepsTheGraph) {
  std::unique_ptr<Graph> g = rich_graph();
  std::string bytes = export_onnx_bytes(*g);
  std::unique_ptr<Graph> back = import_onnx_bytes(bytes);
  EXPECT_EQ(back->name, "rich");
  EXPECT_EQ(back->doc, "a test graph");
  EXPECT_EQ(back->opsets(), g->opsets());
  // The original lists nodes in insertion order; compare in schedule order via the printer.
  EXPECT_EQ(print_graph(*back), print_graph(*g));
  Value* scale = back->find_value("scale");
  EXPECT_TRUE(scale->is_initializer());
  EXPECT_EQ(back->inputs().size(), 3u);
  EXPECT_EQ(back->find_value("h")->shape, (Shape{{Dim::symbolic("batch"), 3}}));
  // Import -> export -> import is a fixed point, node order included.
  std::unique_ptr<Graph> again = import_onnx_bytes(export_onnx_bytes(*back));
  expect_same_graph(*back, *again);
  EXPECT_EQ(export_onnx_bytes(*again), export_onnx_bytes(*back));
}

// A graph attribute (a FusedElementwise body: its own inputs, a constant, one node) survives the
// round trip, and its printed form with it.
TEST(OnnxExport, GraphAttributesRoundTrip) {
  auto body = std::make_shared<Graph>();
  body->name = "body";
  body->set_opset("", 17);
  body->set_opset("com.trainrt", 1);  // a body imports the model's opsets
  Value* bx = body->add_input("x0", DType::kF32, Shape{{Dim::symbolic("batch"), 4}});
  Value* two = body->add_initializer("two", Tensor::scalar<float>(2.f));
  Node* mul = body->add_node("Mul", {bx, two}, {"twice"});
  mul->output(0)->dtype = DType::kF32;
  mul->output(0)->shape = bx->shape;
  body->add_output(mul->output(0));
  Graph g;
  g.name = "outer";
  g.set_opset("", 17);
  g.set_opset("com.trainrt", 1);
  Value* x = g.add_input("x", DType::kF32, Shape{{Dim::symbolic("batch"), 4}});
  Node* fused = g.add_node("FusedElementwise", {x}, {"y"}, kTrainrtDomain, "fused");
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = body;
  fused->set_attr("body", a);
  fused->output(0)->dtype = DType::kF32;
  g.add_output(fused->output(0));

  std::unique_ptr<Graph> back = import_onnx_bytes(export_onnx_bytes(g));
  EXPECT_EQ(print_graph(*back), print_graph(g));
  const Attribute* got = back->nodes()[0]->attr("body");
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(got->kind, Attribute::Kind::kGraph);
  EXPECT_EQ(print_graph(*got->g), print_graph(*body));
  EXPECT_TRUE(got->g->find_value("two")->is_initializer());
}

TEST(OnnxExport, ModelHeader) {
  std::unique_ptr<Graph> g = rich_graph();
  onnx::ModelProto m = onnx::decode_model(export_onnx_bytes(*g));
  EXPECT_EQ(m.ir_version, 8);  // the first IR version of opset 17
  EXPECT_EQ(m.producer_name, "trainrt");
  ASSERT_EQ(m.opset_import.size(), 2u);
  EXPECT_EQ(m.opset_import[0].domain, "");
  EXPECT_EQ(m.opset_import[0].version, 17);
  // Nodes are written in schedule order; typed intermediates get value_info.
  EXPECT_EQ(m.graph.node[0].name, "mm");
  bool h_listed = false;
  for (const auto& v : m.graph.value_info) h_listed |= v.name == "h";
  EXPECT_FALSE(h_listed);  // a graph output, so typed there
  g->set_opset("", 23);
  EXPECT_EQ(onnx::decode_model(export_onnx_bytes(*g)).ir_version, 11);
  g->set_opset("", 7);
  EXPECT_EQ(onnx::decode_model(export_onnx_bytes(*g)).ir_version, 4);
  g->set_opset("ai.onnx.ml", 3);
  EXPECT_EQ(onnx::decode_model(export_onnx_bytes(*g)).ir_version, 8);
}

TEST(OnnxExport, CustomDomainWithoutOpsetGetsVersionOne) {
  Graph h;
  h.set_opset("", 17);
  Value* x = h.add_input("x", DType::kF32, Shape{{2}});
  Node* n = h.add_node("Fused", {x}, {"y"}, "com.example", "fused");
  h.add_output(n->output(0));
  onnx::ModelProto m = onnx::decode_model(export_onnx_bytes(h));
  ASSERT_EQ(m.opset_import.size(), 2u);
  EXPECT_EQ(m.opset_import[1].domain, "com.example");
  EXPECT_EQ(m.opset_import[1].version, 1);
}

TEST(OnnxExport, Errors) {
  Graph no_opset;
  Value* x = no_opset.add_input("x", DType::kF32, Shape{{2}});
  no_opset.add_output(no_opset.add_node("Relu", {x}, {"y"})->output(0));
  EXPECT_THROW(export_onnx_bytes(no_opset), InvalidModel);

  Graph untyped;
  untyped.set_opset("", 17);
  Value* u = untyped.add_input("u", DType::kUndefined, Shape::unknown_rank());
  untyped.add_output(untyped.add_node("Relu", {u}, {"y"})->output(0));
  EXPECT_THROW(export_onnx_bytes(untyped), InvalidModel);

  Graph with_graph_attr;
  with_graph_attr.set_opset("", 17);
  Value* c = with_graph_attr.add_input("c", DType::kBool, Shape{{}});
  Node* n = with_graph_attr.add_node("If", {c}, {"y"}, kOnnxDomain, "if");
  Attribute sub;
  sub.kind = Attribute::Kind::kGraph;
  n->set_attr("then_branch", sub);
  with_graph_attr.add_output(n->output(0));
  try {
    export_onnx_bytes(with_graph_attr);
    FAIL() << "no error";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("node 'if' (If): graph attribute 'then_branch' holds no graph"),
              std::string::npos);
  }

  Graph broken;  // fails verification: the input of the Relu is not defined
  broken.set_opset("", 17);
  broken.add_output(broken.add_node("Relu", {broken.add_value("nowhere")}, {"y"})->output(0));
  EXPECT_THROW(export_onnx_bytes(broken), InvalidModel);
}

TEST(OnnxExport, FileWithExternalData) {
  fs::path dir = make_temp_dir("export");
  std::unique_ptr<Graph> g = rich_graph();
  std::string path = (dir / "m.onnx").string();
  OnnxExportOptions options;
  options.external_data_threshold = 16;
  export_onnx(*g, path, options);
  ASSERT_TRUE(fs::exists(dir / "m.onnx.data"));
  onnx::ModelProto m = onnx::decode_model([&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }());
  int external = 0;
  for (const onnx::TensorProto& t : m.graph.initializer) {
    if (t.data_location != onnx::kLocationExternal) continue;
    ++external;
    for (const auto& e : t.external_data) {
      if (e.key == "offset") {
        EXPECT_EQ(std::stoll(e.value) % 4096, 0) << t.name;
      }
    }
  }
  EXPECT_EQ(external, 2);  // w (48 bytes) and shape (16 bytes); scale and half stay inline
  std::unique_ptr<Graph> back = import_onnx(path);
  expect_same_graph(*import_onnx_bytes(export_onnx_bytes(*g)), *back);

  export_onnx(*g, (dir / "named.onnx").string(),
              {.external_data_threshold = 1, .external_data_file = "weights.bin"});
  EXPECT_TRUE(fs::exists(dir / "weights.bin"));
  expect_same_graph(*back, *import_onnx((dir / "named.onnx").string()));

  EXPECT_THROW(export_onnx(*g, (dir / "x.onnx").string(),
                           {.external_data_threshold = 1, .external_data_file = "../x"}),
               InvalidModel);
  EXPECT_THROW(export_onnx(*g, (dir / "missing_dir" / "x.onnx").string()), InvalidModel);
}

TEST(OnnxExport, InlineFileRoundTrip) {
  fs::path dir = make_temp_dir("export_inline");
  std::unique_ptr<Graph> g = rich_graph();
  std::string path = (dir / "m.onnx").string();
  export_onnx(*g, path);
  EXPECT_FALSE(fs::exists(dir / "m.onnx.data"));
  expect_same_graph(*import_onnx_bytes(export_onnx_bytes(*g)), *import_onnx(path));
}

}  // namespace
}  // namespace trainrt
