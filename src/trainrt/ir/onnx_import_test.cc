#include "trainrt/ir/onnx_import.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "trainrt/core/error.h"
#include "trainrt/core/testing.h"
#include "trainrt/ir/onnx_tensor.h"
#include "trainrt/ir/onnx_testing.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;

// y = Relu(MatMul(x, w)) with x: (batch, 4), w: (4, 2) initializer.
onnx::GraphProto mlp_graph() {
  onnx::GraphProto g;
  g.name = "mlp";
  g.input.push_back(tensor_info("x", kFloat, {"batch", "4"}));
  g.initializer.push_back(float_tensor("w", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  g.node.push_back(make_node("MatMul", {"x", "w"}, {"h"}, "mm"));
  g.node.push_back(make_node("Relu", {"h"}, {"y"}, "relu"));
  g.output.push_back(tensor_info("y", kFloat, {"batch", "2"}));
  return g;
}

// Runs fn, expecting an exception of type E whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    std::string m = e.what();
    for (std::string_view p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

template <typename E>
void expect_import_error(const onnx::ModelProto& m, std::initializer_list<std::string_view> parts) {
  std::string bytes = encode(m);
  expect_error<E>([&] { import_onnx_bytes(bytes); }, parts);
}

TEST(OnnxImport, SimpleModel) {
  onnx::ModelProto m = make_model(mlp_graph());
  m.opset_import.push_back({"com.trainrt", 1});
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(m));
  EXPECT_EQ(g->name, "mlp");
  EXPECT_EQ(g->opset(""), 17);
  EXPECT_EQ(g->opset("com.trainrt"), 1);
  ASSERT_EQ(g->inputs().size(), 1u);
  Value* x = g->inputs()[0];
  EXPECT_EQ(x->dtype, DType::kF32);
  EXPECT_EQ(x->shape, (Shape{{Dim::symbolic("batch"), 4}}));
  ASSERT_EQ(g->num_nodes(), 2);
  Node* mm = g->nodes()[0];
  EXPECT_EQ(mm->op_type(), "MatMul");
  EXPECT_EQ(mm->name(), "mm");
  EXPECT_EQ(mm->input(0), x);
  Value* w = g->find_value("w");
  ASSERT_TRUE(w && w->is_initializer());
  expect_close(w->data, make_tensor<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(g->outputs()[0]->shape, (Shape{{Dim::symbolic("batch"), 2}}));
  EXPECT_EQ(g->outputs()[0]->producer, g->nodes()[1]);
}

TEST(OnnxImport, InputShapes) {
  onnx::GraphProto g;
  g.input.push_back(tensor_info("a", kFloat, {"2", "n", "?"}));
  g.input.push_back(unranked_info("b", kInt64));
  g.input.push_back(tensor_info("c", kBool, {}));  // a scalar
  g.node.push_back(make_node("Identity", {"a"}, {"y"}));
  g.output.push_back(tensor_info("y", kFloat, {"2", "n", "?"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  Value* a = graph->find_value("a");
  ASSERT_EQ(a->shape.rank(), 3);
  EXPECT_EQ(a->shape.dims[0].value, 2);
  EXPECT_EQ(a->shape.dims[1].symbol, "n");
  EXPECT_FALSE(a->shape.dims[2].is_static());
  EXPECT_TRUE(a->shape.dims[2].symbol.empty());
  Value* b = graph->find_value("b");
  EXPECT_EQ(b->dtype, DType::kI64);
  EXPECT_FALSE(b->shape.rank_known);
  Value* c = graph->find_value("c");
  EXPECT_EQ(c->dtype, DType::kBool);
  EXPECT_TRUE(c->shape.rank_known);
  EXPECT_EQ(c->shape.rank(), 0);
  // Unnamed nodes get unique names.
  EXPECT_EQ(graph->nodes()[0]->name(), "Identity_0");
}

TEST(OnnxImport, InputWithInitializerStaysAnInputWithDefault) {
  onnx::GraphProto g = mlp_graph();
  g.input.push_back(tensor_info("w", kFloat, {"?", "2"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  ASSERT_EQ(graph->inputs().size(), 2u);
  Value* w = graph->inputs()[1];
  EXPECT_EQ(w->name, "w");
  EXPECT_TRUE(w->is_initializer());
  EXPECT_EQ(w->data.dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_FALSE(w->shape.dims[0].is_static());  // the declared type is kept
}

TEST(OnnxImport, ValueInfoTypesIntermediates) {
  onnx::GraphProto g = mlp_graph();
  g.value_info.push_back(tensor_info("h", kFloat, {"batch", "2"}));
  g.value_info.push_back(tensor_info("not_in_graph", kFloat, {"1"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  Value* h = graph->find_value("h");
  EXPECT_EQ(h->dtype, DType::kF32);
  EXPECT_EQ(h->shape, (Shape{{Dim::symbolic("batch"), 2}}));
}

TEST(OnnxImport, AttributesOfEveryKind) {
  onnx::GraphProto g = mlp_graph();
  onnx::AttributeProto floats;
  floats.name = "fs";
  floats.type = onnx::kAttrFloats;
  floats.floats = {0.5f, 1.5f};
  onnx::AttributeProto strings;
  strings.name = "ss";
  strings.type = onnx::kAttrStrings;
  strings.strings = {"a", "b"};
  onnx::AttributeProto tensor;
  tensor.name = "t";
  tensor.type = onnx::kAttrTensor;
  tensor.t = float_tensor("", {2}, {3, 4});
  g.node[1].attribute = {attr_int("i", -3),
                         attr_float("f", 0.25f),
                         attr_string("s", "text"),
                         attr_ints("is", {1, 2, 3}),
                         floats,
                         strings,
                         tensor};
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  Node* relu = graph->nodes()[1];
  EXPECT_EQ(relu->attr_int("i", 0), -3);
  EXPECT_EQ(relu->attr_float("f", 0), 0.25f);
  EXPECT_EQ(relu->attr_string("s", ""), "text");
  EXPECT_EQ(relu->attr_ints("is", {}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(relu->attr_floats("fs", {}), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(relu->attr("ss")->strings, (std::vector<std::string>{"a", "b"}));
  ASSERT_NE(relu->attr_tensor("t"), nullptr);
  expect_close(*relu->attr_tensor("t"), make_tensor<float>({2}, {3, 4}));
}

TEST(OnnxImport, AttributeTypeInferredWhenMissing) {
  // IR version 1 models carry no AttributeProto.type; the value field says it. The node is
  // appended as a second `graph` field, which protobuf merges into the first.
  onnx::GraphProto g;
  g.input.push_back(tensor_info("x", kFloat, {"2", "3"}));
  g.output.push_back(tensor_info("y", kFloat, {"3", "2"}));
  std::string bytes = encode(make_model(g));
  WireWriter attr;
  attr.write_string(1, "perm");
  attr.write_packed(8, std::vector<int64_t>{1, 0});
  WireWriter node;
  node.write_string(1, "x");
  node.write_string(2, "y");
  node.write_string(4, "Transpose");
  node.write_message(5, std::move(attr));
  WireWriter graph;
  graph.write_message(1, std::move(node));
  WireWriter more;
  more.write_message(7, std::move(graph));
  bytes += more.to_string();
  std::unique_ptr<Graph> imported = import_onnx_bytes(bytes);
  ASSERT_EQ(imported->num_nodes(), 1);
  EXPECT_EQ(imported->nodes()[0]->attr_ints("perm", {}), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(imported->inputs().size(), 1u);
}

TEST(OnnxImport, ConstantNodesStayNodes) {
  onnx::GraphProto g;
  onnx::AttributeProto value;
  value.name = "value";
  value.type = onnx::kAttrTensor;
  value.t = float_tensor("", {2}, {1, 2});
  g.node.push_back(make_node("Constant", {}, {"c"}, "const", {value}));
  g.output.push_back(tensor_info("c", kFloat, {"2"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  ASSERT_EQ(graph->num_nodes(), 1);
  EXPECT_EQ(graph->nodes()[0]->op_type(), "Constant");
  EXPECT_FALSE(graph->find_value("c")->is_initializer());
}

TEST(OnnxImport, DomainsAndOptionalInputsAndOutputs) {
  onnx::GraphProto g;
  g.input.push_back(tensor_info("x", kFloat, {"3"}));
  g.input.push_back(tensor_info("max", kFloat, {}));
  g.node.push_back(make_node("Clip", {"x", "", "max"}, {"y"}, "clip", {}, "ai.onnx"));
  g.node.push_back(make_node("Dropout", {"y"}, {"z", ""}, "drop"));
  g.output.push_back(tensor_info("z", kFloat, {"3"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  Node* clip = graph->nodes()[0];
  EXPECT_EQ(clip->domain(), "");  // "ai.onnx" is the ONNX domain
  EXPECT_EQ(clip->num_inputs(), 3);
  EXPECT_EQ(clip->input(1), nullptr);
  Node* drop = graph->nodes()[1];
  EXPECT_EQ(drop->num_outputs(), 2);
  EXPECT_EQ(drop->output(1), nullptr);
}

TEST(OnnxImport, NodesOutOfOrderAreAccepted) {
  onnx::GraphProto g = mlp_graph();
  std::swap(g.node[0], g.node[1]);
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  std::vector<Node*> order = graph->topological_order();
  EXPECT_EQ(order[0]->op_type(), "MatMul");
}

TEST(OnnxImport, DuplicateNodeNamesAreMadeUnique) {
  onnx::GraphProto g = mlp_graph();
  g.node[1].name = "mm";
  g.node.push_back(make_node("Relu", {"y"}, {"z"}, "mm_0"));
  g.output[0].name = "z";
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  EXPECT_EQ(graph->nodes()[0]->name(), "mm");
  EXPECT_EQ(graph->nodes()[1]->name(), "mm_1");  // "mm_0" is taken by a later node
  EXPECT_EQ(graph->nodes()[2]->name(), "mm_0");
}

// ---- errors ----

TEST(OnnxImport, UndefinedInputNamesNodeAndInput) {
  onnx::GraphProto g = mlp_graph();
  g.initializer.clear();
  expect_import_error<InvalidModel>(make_model(g), {"node 'mm' (MatMul)", "input 1 'w' is not defined"});
}

TEST(OnnxImport, ValueProducedTwice) {
  onnx::GraphProto g = mlp_graph();
  g.node.push_back(make_node("Sigmoid", {"h"}, {"y"}, "sig"));
  expect_import_error<InvalidModel>(
      make_model(g), {"value 'y' is produced by node 'relu' (Relu) and by node 'sig' (Sigmoid)"});
  onnx::GraphProto h = mlp_graph();
  h.node.push_back(make_node("Sigmoid", {"h"}, {"x"}, "sig"));
  expect_import_error<InvalidModel>(make_model(h),
                                    {"node 'sig' (Sigmoid)", "output 'x' is also a graph input"});
}

TEST(OnnxImport, ModelLevelErrors) {
  onnx::ModelProto no_graph;
  no_graph.opset_import.push_back({"", 17});
  expect_import_error<InvalidModel>(no_graph, {"no graph"});
  onnx::ModelProto no_opset = make_model(mlp_graph());
  no_opset.opset_import.clear();
  expect_import_error<InvalidModel>(no_opset, {"imports no opset"});
  onnx::ModelProto bad_version = make_model(mlp_graph());
  bad_version.opset_import[0].version = 0;
  expect_import_error<InvalidModel>(bad_version, {"version 0"});
  onnx::GraphProto g = mlp_graph();
  g.node[1].domain = "com.example";
  expect_import_error<InvalidModel>(
      make_model(g), {"node 'relu' (com.example::Relu)", "domain 'com.example' is not imported"});
  onnx::GraphProto o = mlp_graph();
  o.output.push_back(tensor_info("nowhere", kFloat, {}));
  expect_import_error<InvalidModel>(make_model(o), {"graph output 'nowhere'"});
  onnx::GraphProto c = mlp_graph();
  c.node[0].input[0] = "y";  // MatMul reads Relu's output: a cycle
  c.input.clear();
  expect_import_error<InvalidModel>(make_model(c), {"cycle"});
  onnx::GraphProto d = mlp_graph();
  d.initializer.push_back(d.initializer[0]);
  expect_import_error<InvalidModel>(make_model(d), {"initializer 'w' is defined twice"});
  onnx::GraphProto e = mlp_graph();
  e.input.push_back(e.input[0]);
  expect_import_error<InvalidModel>(make_model(e), {"graph input 'x' is declared twice"});
  onnx::GraphProto no_type = mlp_graph();
  no_type.input[0].type = {};
  expect_import_error<InvalidModel>(make_model(no_type), {"graph input 'x' has no element type"});
}

TEST(OnnxImport, AttributeErrors) {
  onnx::GraphProto g = mlp_graph();
  g.node[1].attribute = {attr_int("a", 1), attr_int("a", 2)};
  expect_import_error<InvalidModel>(make_model(g), {"node 'relu' (Relu)", "attribute 'a' is set twice"});
  g.node[1].attribute = {attr_ref("a", onnx::kAttrInt, "outer")};
  expect_import_error<InvalidModel>(
      make_model(g),
      {"node 'relu' (Relu): attribute 'a': ref_attr_name 'outer' is only allowed in a function body"});
  onnx::AttributeProto graph_attr;
  graph_attr.name = "then_branch";
  graph_attr.type = onnx::kAttrGraph;
  g.node[1].attribute = {graph_attr};
  expect_import_error<InvalidModel>(make_model(g),
                                    {"node 'relu' (Relu): attribute 'then_branch': graph attribute holds no graph"});
  // A body of an op other than If, Loop or Scan that reads a value of the enclosing graph is
  // refused, naming it (ir/control_flow.h).
  graph_attr.g = std::make_shared<onnx::GraphProto>(mlp_graph());
  graph_attr.g->input.clear();
  g.node[1].attribute = {graph_attr};
  expect_import_error<InvalidModel>(make_model(g), {"node 'relu' (Relu): attribute 'then_branch'", "is not defined"});
  onnx::AttributeProto sparse;
  sparse.name = "sparse_value";
  sparse.type = onnx::kAttrSparseTensor;
  g.node[1].attribute = {sparse};
  expect_import_error<UnsupportedOp>(
      make_model(g), {"attribute 'sparse_value': SPARSE_TENSOR attributes are not supported"});
  onnx::AttributeProto weird;
  weird.name = "w";
  weird.type = 99;
  g.node[1].attribute = {weird};
  expect_import_error<InvalidModel>(make_model(g), {"unknown attribute type 99"});
}

TEST(OnnxImport, UnsupportedElementTypesNameValueAndType) {
  struct Case {
    int32_t type;
    const char* name;
  };
  for (Case c :
       {Case{kString, "STRING"}, Case{kInt16, "INT16"}, Case{kUint16, "UINT16"}, Case{kUint64, "UINT64"},
        Case{kComplex64, "COMPLEX64"}, Case{kFloat8e4m3fn, "FLOAT8E4M3FN"}, Case{kInt4, "INT4"}}) {
    onnx::GraphProto g = mlp_graph();
    g.input.push_back(tensor_info("odd", c.type, {"2"}));
    expect_import_error<UnsupportedOp>(make_model(g), {"graph input 'odd'", c.name});
    onnx::GraphProto h = mlp_graph();
    h.initializer[0].data_type = c.type;
    h.initializer[0].float_data.clear();
    expect_import_error<UnsupportedOp>(make_model(h), {"initializer 'w'", c.name});
    onnx::GraphProto o = mlp_graph();
    o.output[0].type.elem_type = c.type;
    expect_import_error<UnsupportedOp>(make_model(o), {"graph output 'y'", c.name});
  }
  // Sequence types are not encoded by our writer: the model is written by hand.
  WireWriter type;
  type.write_bytes(4, "");
  WireWriter info;
  info.write_string(1, "s");
  info.write_message(2, std::move(type));
  WireWriter graph;
  graph.write_message(11, std::move(info));
  WireWriter model;
  model.write_message(7, std::move(graph));
  WireWriter opset;
  opset.write_int64(2, 17);
  model.write_message(8, std::move(opset));
  std::string bytes = model.to_string();
  expect_error<UnsupportedOp>([&] { import_onnx_bytes(bytes); },
                              {"graph input 's': sequence values are not supported"});
}

TEST(OnnxImport, SparseInitializersAreRefused) {
  WireWriter graph;
  graph.write_bytes(15, "");
  WireWriter model;
  model.write_message(7, std::move(graph));
  WireWriter opset;
  opset.write_int64(2, 17);
  model.write_message(8, std::move(opset));
  std::string bytes = model.to_string();
  expect_error<UnsupportedOp>([&] { import_onnx_bytes(bytes); }, {"sparse initializers"});
}

TEST(OnnxImport, MalformedBytesNameWhere) {
  onnx::GraphProto g = mlp_graph();
  std::string bytes = encode(make_model(g));
  // Point the Relu node's op_type length past its end: find "Relu" preceded by its length byte.
  size_t at = bytes.find("Relu");
  ASSERT_NE(at, std::string::npos);
  bytes[at - 1] = 0x7f;
  expect_error<InvalidModel>([&] { import_onnx_bytes(bytes); },
                             {"graph: node #1 'relu'", "runs past the end"});
}

TEST(OnnxImport, EveryTruncationThrowsInvalidModel) {
  onnx::GraphProto g = mlp_graph();
  g.node[1].attribute = {attr_ints("perm", {1, 0}), attr_float("alpha", 0.5f)};
  g.value_info.push_back(tensor_info("h", kFloat, {"batch", "2"}));
  std::string bytes = encode(make_model(g));
  ASSERT_NO_THROW(import_onnx_bytes(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string_view prefix(bytes.data(), n);
    EXPECT_THROW(import_onnx_bytes(prefix), InvalidModel) << "prefix of " << n << " bytes";
  }
}

TEST(OnnxImport, CorruptedBytesNeverCrash) {
  onnx::GraphProto g = mlp_graph();
  g.node[1].attribute = {attr_ints("perm", {1, 0}), attr_string("mode", "x")};
  std::string bytes = encode(make_model(g));
  std::mt19937 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string b = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      import_onnx_bytes(b);
    } catch (const InvalidModel&) {
      ++errors;
    } catch (const UnsupportedOp&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(OnnxImport, FileErrorsNameTheFile) {
  std::filesystem::path dir = make_temp_dir("import_file");
  std::string missing = (dir / "missing.onnx").string();
  expect_error<InvalidModel>([&] { import_onnx(missing); }, {"ONNX model '" + missing + "'", "cannot open"});
  expect_error<InvalidModel>([&] { import_onnx(dir.string()); }, {"is a directory"});
  expect_error<InvalidModel>([&] { import_onnx("/dev/null"); }, {"ONNX model '/dev/null'", "no graph"});
  std::string path = (dir / "bad.onnx").string();
  onnx::GraphProto g = mlp_graph();
  g.initializer.clear();
  std::ofstream(path, std::ios::binary) << encode(make_model(g));
  expect_error<InvalidModel>([&] { import_onnx(path); }, {"ONNX model '" + path + "'", "node 'mm' (MatMul)"});
  std::string good = (dir / "good.onnx").string();
  std::ofstream(good, std::ios::binary) << encode(make_model(mlp_graph()));
  EXPECT_EQ(import_onnx(good)->num_nodes(), 2);
}

}  // namespace
}  // namespace trainrt
