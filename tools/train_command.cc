// `trainrt train MODEL.onnx --data DATA.safetensors --input NAME --label NAME ...`: trains an ONNX
// model from C++ alone. The loss node is appended by TrainRT; every floating-point initializer is
// trained unless listed in --frozen. Prints `step I loss X` per step, then throughput and peak
// memory; --save DIR writes the checkpoint and the trained inference model.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "cli_common.h"
#include "trainrt/ir/onnx_import.h"
#include "trainrt/train/loss_builder.h"
#include "trainrt/train/safetensors.h"
#include "trainrt/train/training_session.h"

namespace trainrt::cli {
namespace {

constexpr const char* kTrainUsage =
    "usage: trainrt train MODEL.onnx --data DATA.safetensors --input NAME --label NAME\n"
    "         --loss cross_entropy|mse --optimizer sgd|adamw --lr LR --batch B --steps N\n"
    "         [--weight-decay W] [--momentum M] [--max-grad-norm X] [--warmup N] [--frozen NAME,...]\n"
    "         [--output NAME] [--no-shuffle] [--seed S] [--save DIR] [--codegen]";

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string require(const Args& args, const std::string& name) {
  if (!args.has(name)) throw Error(fmt("train: missing ", name, "\n", kTrainUsage));
  return args.get(name, "");
}

double number(const Args& args, const std::string& name, double fallback) {
  if (!args.has(name)) return fallback;
  try {
    return std::stod(args.get(name, ""));
  } catch (const std::exception&) {
    throw Error(fmt("train: ", name, " expects a number, got '", args.get(name, ""), "'"));
  }
}

// Rows `rows` of `t` (first dim) gathered into a new tensor, converted to `dtype` when it differs.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows, DType dtype) {
  std::vector<int64_t> dims = t.dims();
  dims[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(dtype, dims);
  const int64_t row_elems = t.dim(0) ? t.numel() / t.dim(0) : 0;
  const size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(t.dtype());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (dtype == t.dtype()) {
      std::memcpy(static_cast<std::byte*>(out.raw()) + r * row_bytes,
                  static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(rows[r]) * row_bytes, row_bytes);
      continue;
    }
    for (int64_t e = 0; e < row_elems; ++e) {
      int64_t src = rows[r] * row_elems + e, dst = static_cast<int64_t>(r) * row_elems + e;
      if (dtype == DType::kI64) out.data<int64_t>()[dst] = t.to_i64(src);
      else if (dtype == DType::kF32) out.data<float>()[dst] = static_cast<float>(t.to_double(src));
      else if (dtype == DType::kF64) out.data<double>()[dst] = t.to_double(src);
      else throw UnsupportedOp(fmt("train: cannot convert data of dtype ", dtype_name(t.dtype()), " to ", dtype_name(dtype)));
    }
  }
  return out;
}

TrainingConfig make_config(const Args& args, const std::string& loss) {
  TrainingConfig config;
  config.loss = loss;
  if (args.has("--frozen")) config.frozen = split_commas(args.get("--frozen", ""));
  config.seed = static_cast<uint64_t>(number(args, "--seed", 0));
  if (args.has("--codegen")) config.codegen = CodegenOptions{};  // generated elementwise kernels
  std::string optimizer = require(args, "--optimizer");
  double lr = number(args, "--lr", -1);
  if (lr < 0) throw Error(fmt("train: --lr is required and must be >= 0\n", kTrainUsage));
  if (optimizer == "sgd") {
    config.optimizer.kind = OptimizerKind::kSgd;
    config.optimizer.sgd.lr = lr;
    config.optimizer.sgd.momentum = number(args, "--momentum", 0);
    config.optimizer.sgd.weight_decay = number(args, "--weight-decay", 0);
  } else if (optimizer == "adamw") {
    config.optimizer.kind = OptimizerKind::kAdam;
    config.optimizer.adam = AdamOptions::adamw();  // torch.optim.AdamW defaults
    config.optimizer.adam.lr = lr;
    config.optimizer.adam.weight_decay = number(args, "--weight-decay", config.optimizer.adam.weight_decay);
  } else {
    throw Error(fmt("train: unknown optimizer '", optimizer, "'; choose sgd or adamw"));
  }
  config.optimizer.max_grad_norm = number(args, "--max-grad-norm", 0);
  config.schedule.warmup_steps = static_cast<int64_t>(number(args, "--warmup", 0));
  return config;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

int train_command(const Args& args) {
  if (args.positional.size() != 1) throw Error(kTrainUsage);
  std::shared_ptr<Graph> graph = import_onnx(args.positional[0]);
  const std::string input = require(args, "--input"), label = require(args, "--label");
  if (graph->inputs().size() != 1 || graph->inputs()[0]->name != input)
    throw Error(fmt("train: the model must have exactly one graph input, named by --input ('", input, "'); it has ",
                    graph->inputs().size()));
  if (graph->outputs().empty()) throw Error("train: the model has no output");
  const std::string output = args.get("--output", graph->outputs()[0]->name);
  LossKind kind = parse_loss_kind(require(args, "--loss"));
  std::string loss = append_loss(*graph, kind, output, label);
  DType label_dtype = graph->find_value(label)->dtype;
  DType input_dtype = graph->inputs()[0]->dtype;

  auto data = read_safetensors(require(args, "--data"));
  for (const std::string& name : {input, label})
    if (!data.count(name)) throw Error(fmt("train: the data file has no tensor '", name, "'"));
  const Tensor& xs = data.at(input);
  const Tensor& ys = data.at(label);
  if (xs.rank() < 1 || ys.rank() < 1 || xs.dim(0) != ys.dim(0) || xs.dim(0) == 0)
    throw Error(fmt("train: '", input, "' ", describe(xs), " and '", label, "' ", describe(ys),
                    " must have the same number of rows (first dim), at least one"));
  const int64_t rows = xs.dim(0);
  const int64_t batch = static_cast<int64_t>(number(args, "--batch", 0));
  const int64_t steps = static_cast<int64_t>(number(args, "--steps", 0));
  if (batch <= 0 || steps <= 0) throw Error(fmt("train: --batch and --steps must be positive\n", kTrainUsage));

  TrainingSession trainer(graph, make_config(args, loss));
  const bool shuffle = !args.has("--no-shuffle");
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(static_cast<uint64_t>(number(args, "--seed", 0)));
  std::printf("training %s: %zu parameters tensors, %lld rows, batch %lld, %lld steps, loss %s\n",
              args.positional[0].c_str(), trainer.parameter_names().size(), static_cast<long long>(rows),
              static_cast<long long>(batch), static_cast<long long>(steps), args.get("--loss", "").c_str());

  auto start = std::chrono::steady_clock::now();
  int64_t cursor = 0;  // position in the (shuffled) epoch order
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> picked(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) {
      if (cursor == rows) cursor = 0;
      if (cursor == 0 && shuffle) std::shuffle(order.begin(), order.end(), rng);
      picked[static_cast<size_t>(i)] = order[static_cast<size_t>(cursor++)];
    }
    float value = trainer.train_step({gather_rows(xs, picked, input_dtype), gather_rows(ys, picked, label_dtype)});
    trainer.optimizer_step();
    std::printf("step %lld loss %.7g\n", static_cast<long long>(step + 1), value);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("throughput: %.1f steps/s, %.0f samples/s over %lld steps (%.3f s)\n",
              static_cast<double>(steps) / seconds, static_cast<double>(steps * batch) / seconds,
              static_cast<long long>(steps), seconds);
  std::printf("peak memory: %.1f MiB resident\n", peak_rss_mib());

  if (args.has("--save")) {
    std::filesystem::path dir = args.get("--save", "");
    std::filesystem::create_directories(dir);
    trainer.checkpoint().save(dir / "checkpoint.trainrt");
    trainer.export_inference_model(dir / "model.onnx", {output});
    std::printf("saved %s and %s\n", (dir / "checkpoint.trainrt").c_str(), (dir / "model.onnx").c_str());
  }
  return 0;
}

}  // namespace trainrt::cli
