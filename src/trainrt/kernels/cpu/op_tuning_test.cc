// Op tuning: with tuning on, a product's split is measured once and recorded (and the product is
// the untuned one's, within the library's rounding); the results file is written, read back with
// tuning off (no measuring), and ignored when it was made on another CPU or is malformed.
#include "trainrt/kernels/cpu/op_tuning.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trainrt/core/testing.h"
#include "trainrt/kernels/cpu/gemm.h"

namespace trainrt {
namespace {

namespace fs = std::filesystem;

struct TuningTest : ::testing::Test {
  fs::path file = fs::temp_directory_path() / ("trainrt-tuning-" + std::to_string(::getpid()) + ".json");
  void TearDown() override {
    set_tuning_options({});
    fs::remove(file);
  }
};

// C (m, n) = A (m, k) B (k, n) with a shape no other test uses.
Tensor product(int64_t m, int64_t n, int64_t k) {
  const Tensor a = testing::random_tensor({m, k}, 1), b = testing::random_tensor({k, n}, 2);
  Tensor c = Tensor::zeros(DType::kF32, {m, n});
  gemm_f32(false, false, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), n, 0.f, c.data<float>(), n);
  return c;
}

std::map<std::string, std::string> choices_in(const fs::path& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j["choices"].items()) out[key] = value["choice"];
  return out;
}

TEST_F(TuningTest, MeasuresOnceRecordsAndWritesTheFile) {
  const Tensor untuned = product(200, 328, 72);
  set_tuning_options({.enabled = true, .max_ms = 200, .results_path = file.string()});
  const Tensor tuned = product(200, 328, 72);
  testing::expect_close(tuned, untuned, 1e-5, 1e-5);
  const auto choices = choices_in(file);  // this test's product only: it runs first
  ASSERT_EQ(choices.size(), 1u);
  const auto& [key, choice] = *choices.begin();
  EXPECT_NE(key.find("gemm f32 NN m=200 n=328 k=72"), std::string::npos) << key;
  EXPECT_TRUE(choice == "whole" || choice.rfind("columns ", 0) == 0 || choice.rfind("rows ", 0) == 0) << choice;
  EXPECT_EQ(tuned_choice(key), choice);

  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["cpu"], tuning_cpu());
  EXPECT_EQ(j["onednn"].get<std::string>() + " " + j["trainrt"].get<std::string>(), tuning_library_versions());
}

// With no time to measure the others, the default split (64-column blocks) is measured first and
// kept: a short budget never makes a product slower than untuned.
TEST_F(TuningTest, ATooShortBudgetKeepsTheDefaultSplit) {
  set_tuning_options({.enabled = true, .max_ms = 1e-6, .results_path = file.string()});
  product(136, 392, 40);
  int found = 0;
  for (const auto& [key, choice] : choices_in(file))
    if (key.find("m=136 n=392 k=40") != std::string::npos) {
      EXPECT_EQ(choice, "columns 64");
      ++found;
    }
  EXPECT_EQ(found, 1);
}

TEST_F(TuningTest, AResultsFileIsReadWithTuningOff) {
  nlohmann::json j = {{"format", "trainrt-tuning 1"},
                      {"cpu", tuning_cpu()},
                      {"onednn", tuning_library_versions().substr(0, tuning_library_versions().find(' '))},
                      {"trainrt", tuning_library_versions().substr(tuning_library_versions().find(' ') + 1)},
                      {"choices", {{"some problem", {{"choice", "rows 128"}, {"us", 3.5}}}}}};
  std::ofstream(file) << j.dump();
  set_tuning_options({.enabled = false, .results_path = file.string()});
  EXPECT_EQ(tuned_choice("some problem"), "rows 128");
}

TEST_F(TuningTest, AFileFromAnotherCpuOrMalformedIsIgnored) {
  nlohmann::json j = {{"format", "trainrt-tuning 1"},
                      {"cpu", "some other CPU"},
                      {"onednn", "0.0.0"},
                      {"trainrt", "0"},
                      {"choices", {{"foreign problem", {{"choice", "whole"}, {"us", 1.0}}}}}};
  std::ofstream(file) << j.dump();
  set_tuning_options({.enabled = false, .results_path = file.string()});
  EXPECT_EQ(tuned_choice("foreign problem"), std::nullopt);

  std::ofstream(file) << "{ not json";
  set_tuning_options({.enabled = false, .results_path = file.string()});
  EXPECT_EQ(tuned_choice("foreign problem"), std::nullopt);
}

}  // namespace
}  // namespace trainrt
