// Trains an ONNX model from C++ with TrainRT, then writes its inference model.
//
//   train_onnx model.onnx logits trained.onnx [steps] [batch]
//
// The model's float inputs get random batches (every symbolic dim = batch); a cross-entropy loss on
// `logits` (N, C) is appended with a label input, and one fixed batch is fitted with AdamW, so the
// loss must fall. Prints the first and last loss; exits non-zero on any error, with its message.
#include <cstdio>
#include <random>
#include <string>

#include "trainrt/trainrt.h"

using namespace trainrt;

// A tensor for input `v`: its dims with symbolic ones set to `batch`; normal floats, or class ids.
Tensor make_input(const Value& v, int64_t batch, int64_t classes, std::mt19937& rng) {
  std::vector<int64_t> dims;
  for (const Dim& d : v.shape.dims) dims.push_back(d.is_static() ? d.value : batch);
  Tensor t = Tensor::empty(v.dtype, dims);
  if (v.dtype == DType::kF32) {
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  } else {
    std::uniform_int_distribution<int64_t> label(0, classes - 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = label(rng);
  }
  return t;
}

int main(int argc, char** argv) try {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s model.onnx logits trained.onnx [steps] [batch]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 4 ? std::stoi(argv[4]) : 20;
  const int64_t batch = argc > 5 ? std::stoll(argv[5]) : 8;
  std::shared_ptr<Graph> graph = import_onnx(argv[1]);
  const std::string loss = append_loss(*graph, LossKind::kCrossEntropy, argv[2], "label");
  const int64_t classes = graph->find_value(argv[2])->shape.dims.back().value;

  TrainingConfig config{.loss = loss, .optimizer = {.kind = OptimizerKind::kAdam}};
  config.optimizer.adam.lr = 1e-2;
  TrainingSession trainer(graph, config);
  std::mt19937 rng(0);
  std::vector<Tensor> inputs;
  for (const Value* v : graph->inputs())
    if (!v->is_initializer()) inputs.push_back(make_input(*v, batch, classes, rng));

  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    last = trainer.train_step(inputs);
    trainer.optimizer_step();
    if (step == 0) first = last;
  }
  trainer.export_inference_model(argv[3], {argv[2]});
  std::printf("loss %.4f -> %.4f after %d steps; wrote %s\n", first, last, steps, argv[3]);
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_onnx: %s\n", e.what());
  return 1;
}
