#include "trainrt/ir/onnx_inline.h"

#include <gtest/gtest.h>

#include "trainrt/core/error.h"
#include "trainrt/ir/onnx_export.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/ir/onnx_testing.h"

namespace trainrt {
namespace {

using namespace trainrt::testing;

// custom::ScaledAct(X, [B]) -> (Y, [Aux]) with attributes alpha (default 2.0) and mode (no default):
//   t = Mul(X, alpha as a Constant); u = Add(t, B); Y = LeakyRelu(u, alpha=@alpha); Aux = Identity(t)
onnx::FunctionProto scaled_act() {
  onnx::FunctionProto f;
  f.name = "ScaledAct";
  f.domain = "custom";
  f.input = {"X", "B"};
  f.output = {"Y", "Aux"};
  f.attribute = {"mode"};
  f.attribute_proto = {attr_float("alpha", 2.f)};
  f.opset_import = {{"", 17}, {"com.microsoft", 1}};
  f.node.push_back(
      make_node("Constant", {}, {"a"}, "const", {attr_ref("value_float", onnx::kAttrFloat, "alpha")}));
  f.node.push_back(make_node("Mul", {"X", "a"}, {"t"}, "mul"));
  f.node.push_back(make_node("Add", {"t", "B"}, {"u"}, ""));
  f.node.push_back(make_node("LeakyRelu", {"u"}, {"Y"}, "act",
                             {attr_ref("alpha", onnx::kAttrFloat, "alpha"),
                              attr_ref("mode", onnx::kAttrString, "mode"), attr_int("fixed", 1)}));
  f.node.push_back(make_node("Identity", {"t"}, {"Aux"}, "aux"));
  return f;
}

onnx::ModelProto call_model(onnx::NodeProto call, std::vector<std::string> outputs) {
  onnx::GraphProto g;
  g.input.push_back(tensor_info("x", kFloat, {"3"}));
  g.input.push_back(tensor_info("b", kFloat, {"3"}));
  g.node.push_back(std::move(call));
  for (const std::string& o : outputs) g.output.push_back(tensor_info(o, kFloat, {"3"}));
  onnx::ModelProto m = make_model(g);
  m.opset_import.push_back({"custom", 1});
  m.functions.push_back(scaled_act());
  return m;
}

TEST(OnnxInline, BindsInputsOutputsAndAttributes) {
  onnx::ModelProto m = call_model(make_node("ScaledAct", {"x", "b"}, {"y", "aux"}, "call",
                                            {attr_float("alpha", 0.5f), attr_string("mode", "m")}, "custom"),
                                  {"y", "aux"});
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(m));
  ASSERT_EQ(g->num_nodes(), 5);
  EXPECT_EQ(g->opset("com.microsoft"), 1);  // the function's opset imports are merged
  Node* act = g->find_value("y")->producer;
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->op_type(), "LeakyRelu");
  EXPECT_EQ(act->name(), "call/act");
  EXPECT_EQ(act->attr_float("alpha", 0), 0.5f);
  EXPECT_EQ(act->attr_string("mode", ""), "m");
  EXPECT_EQ(act->attr_int("fixed", 0), 1);
  Node* add = act->input(0)->producer;
  EXPECT_EQ(add->op_type(), "Add");
  EXPECT_EQ(add->name(), "call/Add");
  EXPECT_EQ(add->input(1), g->find_value("b"));
  EXPECT_EQ(add->input(0)->name, "call/t");
  Node* constant = g->find_value("call/a")->producer;
  EXPECT_EQ(constant->attr_float("value_float", 0), 0.5f);
  EXPECT_EQ(g->find_value("aux")->producer->op_type(), "Identity");
}

TEST(OnnxInline, DefaultsOmittedOptionalsAndUnsetAttributes) {
  // No alpha (default 2.0), no mode (dropped), no B (omitted input), no Aux (fresh unused value).
  onnx::ModelProto m = call_model(make_node("ScaledAct", {"x"}, {"y"}, "", {}, "custom"), {"y"});
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(m));
  Node* act = g->find_value("y")->producer;
  EXPECT_EQ(act->attr_float("alpha", 0), 2.f);
  EXPECT_FALSE(act->has_attr("mode"));
  Node* add = act->input(0)->producer;
  EXPECT_EQ(add->num_inputs(), 2);
  EXPECT_EQ(add->input(1), nullptr);
  EXPECT_EQ(add->name(), "ScaledAct/Add");  // an unnamed call is prefixed with the function name
  EXPECT_NE(g->find_value("ScaledAct/Aux"), nullptr);
}

TEST(OnnxInline, InternalNamesNeverCollide) {
  // The graph already uses "call/t", the name the body's "t" would get.
  onnx::ModelProto m =
      call_model(make_node("ScaledAct", {"x", "b"}, {"y"}, "call", {}, "custom"), {"y", "call/t"});
  m.graph.node.push_back(make_node("Neg", {"x"}, {"call/t"}, "neg"));
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(m));
  EXPECT_EQ(g->find_value("call/t")->producer->op_type(), "Neg");
  EXPECT_EQ(g->find_value("call/t_1")->producer->op_type(), "Mul");
}

TEST(OnnxInline, NestedCallsAndTwoCallSites) {
  // custom::Twice(X) = ScaledAct(ScaledAct(X, alpha=@k), alpha=3), with attribute k.
  onnx::FunctionProto twice;
  twice.name = "Twice";
  twice.domain = "custom";
  twice.input = {"X"};
  twice.output = {"Z"};
  twice.attribute = {"k"};
  twice.node.push_back(
      make_node("ScaledAct", {"X"}, {"M"}, "first", {attr_ref("alpha", onnx::kAttrFloat, "k")}, "custom"));
  twice.node.push_back(make_node("ScaledAct", {"M"}, {"Z"}, "second", {attr_float("alpha", 3.f)}, "custom"));
  onnx::ModelProto m =
      call_model(make_node("Twice", {"x"}, {"y"}, "a", {attr_float("k", 0.25f)}, "custom"), {"y", "z"});
  m.graph.node.push_back(make_node("Twice", {"y"}, {"z"}, "b", {}, "custom"));
  m.functions.push_back(twice);
  std::unique_ptr<Graph> g = import_onnx_bytes(encode(m));
  EXPECT_EQ(g->num_nodes(), 4 * 5);
  Value* first_act = g->find_value("a/M");
  ASSERT_NE(first_act, nullptr);
  EXPECT_EQ(first_act->producer->name(), "a/first/act");
  EXPECT_EQ(first_act->producer->attr_float("alpha", 0), 0.25f);
  EXPECT_EQ(g->find_value("y")->producer->attr_float("alpha", 0), 3.f);
  // Call b gives no k: the inner call gets no alpha and falls back to ScaledAct's default.
  EXPECT_EQ(g->find_value("b/M")->producer->attr_float("alpha", 0), 2.f);
  // The inlined graph exports and imports again unchanged.
  std::unique_ptr<Graph> back = import_onnx_bytes(export_onnx_bytes(*g));
  EXPECT_EQ(back->num_nodes(), g->num_nodes());
}

TEST(OnnxInline, Errors) {
  auto error_of = [](const onnx::ModelProto& m) -> std::string {
    try {
      import_onnx_bytes(encode(m));
    } catch (const InvalidModel& e) {
      return e.what();
    }
    return "no InvalidModel";
  };
  onnx::ModelProto too_many =
      call_model(make_node("ScaledAct", {"x", "b", "x"}, {"y"}, "call", {}, "custom"), {"y"});
  EXPECT_NE(error_of(too_many).find("node 'call' (custom::ScaledAct): has 3 inputs"), std::string::npos);

  onnx::ModelProto recursive = call_model(make_node("ScaledAct", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  recursive.functions[0].node.push_back(make_node("ScaledAct", {"X"}, {"again"}, "self", {}, "custom"));
  EXPECT_NE(error_of(recursive).find("calls itself"), std::string::npos);

  onnx::ModelProto outer = call_model(make_node("ScaledAct", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  outer.functions[0].node.push_back(make_node("Neg", {"x"}, {"n"}, "neg"));  // "x" is the caller's name
  EXPECT_NE(error_of(outer).find("input 'x' is neither a function input nor produced in the body"),
            std::string::npos);

  onnx::ModelProto unproduced = call_model(make_node("ScaledAct", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  unproduced.functions[0].output.push_back("Never");
  EXPECT_NE(error_of(unproduced).find("output 'Never' is not produced"), std::string::npos);

  onnx::ModelProto bad_opset = call_model(make_node("ScaledAct", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  bad_opset.functions[0].opset_import.push_back({"com.other", 0});
  EXPECT_NE(
      error_of(bad_opset).find("function 'ScaledAct': opset import of domain 'com.other' has version 0"),
      std::string::npos);

  onnx::ModelProto twice = call_model(make_node("ScaledAct", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  twice.functions.push_back(twice.functions[0]);
  EXPECT_NE(error_of(twice).find("defined twice"), std::string::npos);
}

TEST(OnnxInline, DeepNestingIsRefused) {
  // F0 calls F1 calls ... F99: deeper than the limit, refused without exhausting the stack.
  onnx::ModelProto m = call_model(make_node("F0", {"x"}, {"y"}, "call", {}, "custom"), {"y"});
  m.functions.clear();
  for (int i = 0; i < 100; ++i) {
    onnx::FunctionProto f;
    f.name = "F" + std::to_string(i);
    f.domain = "custom";
    f.input = {"X"};
    f.output = {"Y"};
    bool last = i == 99;
    f.node.push_back(
        make_node(last ? "Relu" : "F" + std::to_string(i + 1), {"X"}, {"Y"}, "n", {}, last ? "" : "custom"));
    m.functions.push_back(f);
  }
  EXPECT_THROW(import_onnx_bytes(encode(m)), InvalidModel);
}

TEST(OnnxInline, NormalizeDomain) {
  EXPECT_EQ(normalize_domain("ai.onnx"), "");
  EXPECT_EQ(normalize_domain(""), "");
  EXPECT_EQ(normalize_domain("com.microsoft"), "com.microsoft");
}

}  // namespace
}  // namespace trainrt
