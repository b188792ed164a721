// Import and export of control-flow bodies that read the enclosing graph (ir/control_flow.h).
#include "trainrt/ir/control_flow.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;

// then_branch reads a and b, else_branch reads b and c: If(cond) with values of the graph.
onnx::GraphProto if_graph() {
  onnx::GraphProto then_branch;
  then_branch.name = "then";
  then_branch.node.push_back(make_node("Add", {"a", "b"}, {"t"}, "add"));
  then_branch.output.push_back(tensor_info("t", kFloat, {"2"}));
  onnx::GraphProto else_branch;
  else_branch.name = "else";
  else_branch.node.push_back(make_node("Mul", {"c", "b"}, {"e"}, "mul"));
  else_branch.output.push_back(tensor_info("e", kFloat, {"2"}));
  onnx::GraphProto g;
  g.input = {tensor_info("cond", kBool, {}), tensor_info("a", kFloat, {"2"}), tensor_info("b", kFloat, {"2"})};
  g.initializer.push_back(float_tensor("c", {2}, {3.f, 4.f}));
  g.node.push_back(make_node("If", {"cond"}, {"y"}, "if",
                             {attr_graph("then_branch", then_branch), attr_graph("else_branch", else_branch)}));
  g.output.push_back(tensor_info("y", kFloat, {"2"}));
  return g;
}

std::vector<std::string> names(const std::vector<Value*>& values) {
  std::vector<std::string> out;
  for (const Value* v : values) out.push_back(v ? v->name : "");
  return out;
}

TEST(ControlFlowImport, BodyReadsBecomeInputsOfTheNodeAndOfEveryBody) {
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(make_model(if_graph())));
  const Node* node = g->nodes()[0];
  EXPECT_EQ(names(node->inputs()), (std::vector<std::string>{"cond", "a", "b", "c"}));
  EXPECT_EQ(implicit_inputs(*node), 3u);
  for (const char* branch : {"then_branch", "else_branch"}) {
    const Graph& body = *node->attr(branch)->g;
    EXPECT_EQ(names(body.inputs()), (std::vector<std::string>{"a", "b", "c"})) << branch;
    EXPECT_EQ(body.find_value("c")->dtype, DType::kF32) << branch;  // the initializer's type
  }
}

TEST(ControlFlowImport, NestedBodiesReadThroughEachLevel) {
  // Loop's body holds an If whose branch reads the outermost graph's `w`: the Loop's body takes w
  // as an implicit input too, and passes it on to the If.
  onnx::GraphProto branch;
  branch.node.push_back(make_node("Add", {"v_in", "w"}, {"r"}, "add"));
  branch.output.push_back(tensor_info("r", kFloat, {"2"}));
  onnx::GraphProto other;
  other.node.push_back(make_node("Identity", {"v_in"}, {"s"}, "id"));
  other.output.push_back(tensor_info("s", kFloat, {"2"}));
  onnx::GraphProto body;
  body.input = {tensor_info("i", kInt64, {}), tensor_info("c_in", kBool, {}), tensor_info("v_in", kFloat, {"2"})};
  body.node.push_back(make_node("If", {"c_in"}, {"v_out"}, "inner_if",
                                {attr_graph("then_branch", branch), attr_graph("else_branch", other)}));
  body.node.push_back(make_node("Identity", {"c_in"}, {"c_out"}, "keep"));
  body.output = {tensor_info("c_out", kBool, {}), tensor_info("v_out", kFloat, {"2"})};
  onnx::GraphProto g;
  g.name = "main";
  g.input = {tensor_info("n", kInt64, {}), tensor_info("v", kFloat, {"2"}), tensor_info("w", kFloat, {"2"})};
  g.node.push_back(make_node("Loop", {"n", "", "v"}, {"v_final"}, "loop", {attr_graph("body", body)}));
  g.output.push_back(tensor_info("v_final", kFloat, {"2"}));
  std::unique_ptr<Graph> graph = import_onnx_bytes(encode(make_model(g)));
  const Node* loop = graph->nodes()[0];
  EXPECT_EQ(names(loop->inputs()), (std::vector<std::string>{"n", "", "v", "w"}));
  const Graph& loop_body = *loop->attr("body")->g;
  EXPECT_EQ(names(loop_body.inputs()), (std::vector<std::string>{"i", "c_in", "v_in", "w"}));
  const Node* inner = loop_body.find_value("v_out")->producer;
  EXPECT_EQ(names(inner->inputs()), (std::vector<std::string>{"c_in", "v_in", "w"}));
  EXPECT_EQ(names(inner->attr("else_branch")->g->inputs()), (std::vector<std::string>{"v_in", "w"}));

  // Written back, the reads are outer-scope reads again: no implicit inputs, no extra body inputs.
  onnx::ModelProto back = onnx::decode_model(export_onnx_bytes(*graph));
  const onnx::NodeProto& written = back.graph.node[0];
  EXPECT_EQ(written.input, (std::vector<std::string>{"n", "", "v"}));
  for (const onnx::AttributeProto& a : written.attribute) EXPECT_NE(a.name, kImplicitInputsAttr);
  ASSERT_EQ(written.attribute.size(), 1u);
  EXPECT_EQ(written.attribute[0].g->input.size(), 3u);
  // And read again, the same graph.
  expect_same_graph(*import_onnx_bytes(export_onnx_bytes(*graph)), *graph);
}

TEST(ControlFlowExport, ARenamedEnclosingValueIsReadUnderItsNewName) {
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(make_model(if_graph())));
  g->rename_value(g->find_value("b"), "b_renamed");
  onnx::ModelProto back = onnx::decode_model(export_onnx_bytes(*g));
  const onnx::NodeProto& written = back.graph.node[0];
  EXPECT_EQ(written.input, (std::vector<std::string>{"cond"}));
  for (const onnx::AttributeProto& a : written.attribute)
    EXPECT_EQ(a.g->node[0].input[1], "b_renamed") << a.name;
  // Read again: the same reads (in the order the written bodies first make them).
  std::unique_ptr<Graph> again = import_onnx_bytes(export_onnx_bytes(*g));
  std::vector<std::string> read = names(again->nodes()[0]->inputs());
  std::sort(read.begin() + 1, read.end());
  EXPECT_EQ(read, (std::vector<std::string>{"cond", "a", "b_renamed", "c"}));
}

TEST(ControlFlowImport, ErrorsNameTheNode) {
  onnx::GraphProto g = if_graph();
  g.node[0].attribute[0].g->node[0].input[1] = "nowhere";
  try {
    import_onnx_bytes(encode(make_model(g)));
    FAIL() << "no error";
  } catch (const InvalidModel& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 'if' (If): attribute 'then_branch'"), std::string::npos) << what;
    EXPECT_NE(what.find("input 1 'nowhere' is not defined"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace trainrt
