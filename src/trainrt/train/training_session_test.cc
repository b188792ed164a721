// TrainingSession: learns, accumulates micro-batches, checkpoints, and exports what it learned.
#include "trainrt/train/training_session.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "trainrt/core/testing.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/train/loss_builder.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

// y = x @ w + b with x (batch, 4) and the loss appended: mse against label (batch, 2).
std::shared_ptr<Graph> linear_model(std::string* loss) {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  Value* x = g->add_input("x", DType::kF32, Shape({Dim::symbolic("batch"), 4}));
  Value* w = g->add_initializer("w", Tensor::zeros(DType::kF32, {4, 2}));
  Value* b = g->add_initializer("b", Tensor::zeros(DType::kF32, {2}));
  Value* xw = g->add_node("MatMul", {x, w}, {"xw"})->output(0);
  g->add_output(g->add_node("Add", {xw, b}, {"y"})->output(0));
  *loss = append_loss(*g, LossKind::kMse, "y", "label");
  return g;
}

// Targets from a fixed linear map, so the model can fit them exactly.
Tensor targets(const Tensor& x) {
  const float w[4][2] = {{1, -2}, {0.5f, 1}, {-1, 0}, {2, 0.25f}};
  Tensor y = Tensor::empty(DType::kF32, {x.dim(0), 2});
  for (int64_t i = 0; i < x.dim(0); ++i)
    for (int j = 0; j < 2; ++j) {
      float acc = j ? -0.5f : 0.25f;
      for (int k = 0; k < 4; ++k) acc += x.data<float>()[i * 4 + k] * w[k][j];
      y.data<float>()[i * 2 + j] = acc;
    }
  return y;
}

TEST(TrainingSession, SgdFitsALinearMapAndAdamWToo) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    TrainingConfig config{.loss = "", .optimizer = {.kind = kind}};
    auto g = linear_model(&config.loss);
    config.optimizer.sgd.lr = 0.1;
    config.optimizer.adam.lr = 0.05;
    config.optimizer.adam.weight_decay = 0;
    TrainingSession trainer(g, config);
    float first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      Tensor x = random_tensor({16, 4}, static_cast<uint32_t>(step));
      float value = trainer.train_step({x, targets(x)});
      trainer.optimizer_step();
      if (step == 0) first = value;
      last = value;
    }
    EXPECT_LT(last, first * 1e-3) << "optimizer " << static_cast<int>(kind);
    EXPECT_NEAR(trainer.parameter("w").data<float>()[0], 1.f, 0.05f);
  }
}

TEST(TrainingSession, MicroBatchesAccumulateToTheFullBatchGradient) {
  TrainingConfig config;
  auto g = linear_model(&config.loss);
  TrainingSession trainer(g, config);
  Tensor x = random_tensor({8, 4}, 3);
  Tensor y = targets(x);
  trainer.train_step({x, y});
  Tensor full = trainer.gradient("w").clone();
  trainer.reset_grad();
  // mean loss over 4 rows twice: each half-gradient is the mean over its half, so sum = 2 * full.
  trainer.train_step({Tensor::view(DType::kF32, {4, 4}, x.data<float>()), Tensor::view(DType::kF32, {4, 2}, y.data<float>())});
  trainer.train_step({Tensor::view(DType::kF32, {4, 4}, x.data<float>() + 16), Tensor::view(DType::kF32, {4, 2}, y.data<float>() + 8)});
  Tensor summed = trainer.gradient("w");
  for (int64_t i = 0; i < full.numel(); ++i) EXPECT_NEAR(summed.data<float>()[i], 2 * full.data<float>()[i], 1e-5);
}

TEST(TrainingSession, CheckpointRestoresParametersOptimizerStateAndStep) {
  TrainingConfig config;
  auto g = linear_model(&config.loss);
  TrainingSession a(g, config);
  Tensor x = random_tensor({8, 4}, 5);
  for (int i = 0; i < 3; ++i) {
    a.train_step({x, targets(x)});
    a.optimizer_step();
  }
  auto path = std::filesystem::temp_directory_path() / "trainrt_session_test.ckpt";
  a.checkpoint().save(path);
  CheckpointState loaded;
  loaded.load(path);
  TrainingConfig config_b;
  auto g2 = linear_model(&config_b.loss);
  TrainingSession b(g2, config_b);
  b.load_checkpoint(loaded);
  EXPECT_EQ(b.step(), 3);
  // Both continue identically.
  a.train_step({x, targets(x)});
  a.optimizer_step();
  b.train_step({x, targets(x)});
  b.optimizer_step();
  expect_close(b.parameter("w"), a.parameter("w"), 0, 0);
  std::filesystem::remove(path);
}

TEST(TrainingSession, ExportsAForwardOnlyModelWithTheTrainedWeights) {
  TrainingConfig config;
  auto g = linear_model(&config.loss);
  TrainingSession trainer(g, config);
  Tensor x = random_tensor({4, 4}, 9);
  trainer.train_step({x, targets(x)});
  trainer.optimizer_step();
  auto path = std::filesystem::temp_directory_path() / "trainrt_exported.onnx";
  trainer.export_inference_model(path, {"y"});
  auto reloaded = import_onnx(path.string());
  ASSERT_EQ(reloaded->inputs().size(), 1u);  // the label input is gone with the loss
  Session session(std::move(reloaded));
  Tensor exported_y = session.run({x})[0];
  Tensor trained_y = trainer.eval_step({x, targets(x)})[0];
  expect_close(exported_y, trained_y, 0, 0);
  std::filesystem::remove(path);
}

TEST(TrainingSession, ErrorsNameWhatIsWrong) {
  TrainingConfig config;
  auto g = linear_model(&config.loss);
  config.frozen = {"nope"};
  EXPECT_THROW(TrainingSession(g, config), InvalidModel);
  TrainingConfig ok;
  auto g2 = linear_model(&ok.loss);
  TrainingSession trainer(g2, ok);
  EXPECT_THROW(trainer.optimizer_step(), InvalidModel);  // no gradients yet
}

}  // namespace
}  // namespace trainrt
