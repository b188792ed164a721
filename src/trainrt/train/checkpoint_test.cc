#include "trainrt/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "trainrt/core/error.h"
#include "trainrt/train/crc32c.h"

namespace trainrt {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed at the end of the test.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("trainrt_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

// One tensor of every dtype, with distinct bytes, plus empty and scalar shapes.
Tensor patterned(DType dtype, std::vector<int64_t> dims, uint8_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(dims));
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(seed + i * 31);
  if (dtype == DType::kBool)
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  return t;
}

CheckpointState sample_state() {
  CheckpointState s;
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64,
                       DType::kI32, DType::kI8,  DType::kU8,   DType::kBool};
  uint8_t seed = 1;
  for (DType d : all) s.parameters[fmt("layer/", dtype_name(d))] = patterned(d, {3, 5}, seed++);
  s.parameters["scalar"] = patterned(DType::kF32, {}, 7);
  s.parameters["empty"] = patterned(DType::kF32, {0, 4}, 8);
  OptimizerState adam;
  adam.step = 12;
  adam.exp_avg = patterned(DType::kF32, {3, 5}, 20);
  adam.exp_avg_sq = patterned(DType::kF32, {3, 5}, 21);
  adam.max_exp_avg_sq = patterned(DType::kF32, {3, 5}, 22);
  s.optimizer_states["layer/f32"] = adam;
  OptimizerState sgd;
  sgd.step = 3;
  sgd.momentum_buffer = patterned(DType::kF32, {}, 23);
  s.optimizer_states["scalar"] = sgd;
  s.step = 123456789012;
  s.properties["epoch"] = int64_t{-7};
  s.properties["lr"] = 3e-4;
  s.properties["run"] = std::string("name with \0 byte", 16);
  s.properties["empty"] = std::string();
  return s;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.dims(), b.dims()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw()) % 64, 0u) << what << " is not 64-byte aligned";
}

void expect_same_state(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.properties, b.properties);
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (const auto& [name, t] : b.parameters) expect_same_tensor(a.parameters.at(name), t, name);
  ASSERT_EQ(a.optimizer_states.size(), b.optimizer_states.size());
  for (const auto& [name, s] : b.optimizer_states) {
    const OptimizerState& r = a.optimizer_states.at(name);
    EXPECT_EQ(r.step, s.step) << name;
    expect_same_tensor(r.exp_avg, s.exp_avg, name + " exp_avg");
    expect_same_tensor(r.exp_avg_sq, s.exp_avg_sq, name + " exp_avg_sq");
    expect_same_tensor(r.max_exp_avg_sq, s.max_exp_avg_sq, name + " max_exp_avg_sq");
    expect_same_tensor(r.momentum_buffer, s.momentum_buffer, name + " momentum_buffer");
  }
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes a new file (removing any old one first: ext4 flushes a file truncated and rewritten in
// place on close, which would make the thousands of damaged files below slow to write).
void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Loading `path` throws InvalidModel that names the file, and leaves `state` as it was.
void expect_rejected(const fs::path& path, const std::string& expected_words = "") {
  CheckpointState state = sample_state();
  try {
    state.load(path);
    FAIL() << "loaded a damaged checkpoint";
  } catch (const InvalidModel& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(expected_words), std::string::npos) << message;
  }
  expect_same_state(state, sample_state());
}

TEST(Crc32cTest, KnownValuesAndBothPathsAgree) {
  EXPECT_EQ(crc32c_extend(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  std::string data(1000, '\0');
  std::mt19937 rng(1);
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t split : {0, 1, 7, 8, 500, 999, 1000}) {
    const uint32_t whole = crc32c_extend_portable(0, data.data(), data.size());
    EXPECT_EQ(crc32c_extend(crc32c_extend(0, data.data(), split), data.data() + split, data.size() - split), whole);
  }
}

TEST_F(CheckpointTest, RoundTripsEveryDtypeStateAndProperty) {
  const CheckpointState saved = sample_state();
  saved.save(dir_ / "a.ckpt");
  CheckpointState loaded;
  loaded.load(dir_ / "a.ckpt");
  expect_same_state(loaded, saved);
  // Saving what was loaded gives the same bytes.
  loaded.save(dir_ / "b.ckpt");
  EXPECT_EQ(read_bytes(dir_ / "a.ckpt"), read_bytes(dir_ / "b.ckpt"));
}

TEST_F(CheckpointTest, EmptyStateRoundTrips) {
  CheckpointState empty;
  empty.save(dir_ / "e.ckpt");
  CheckpointState loaded = sample_state();
  loaded.load(dir_ / "e.ckpt");
  expect_same_state(loaded, empty);
}

TEST_F(CheckpointTest, EveryTruncationIsRejected) {
  sample_state().save(dir_ / "a.ckpt");
  const std::string bytes = read_bytes(dir_ / "a.ckpt");
  for (size_t length = 0; length < bytes.size(); ++length) {
    SCOPED_TRACE(length);
    write_bytes(dir_ / "cut.ckpt", bytes.substr(0, length));
    expect_rejected(dir_ / "cut.ckpt");
  }
  write_bytes(dir_ / "long.ckpt", bytes + '\0');
  expect_rejected(dir_ / "long.ckpt", "trailing bytes");
}

TEST_F(CheckpointTest, EveryByteFlipIsRejected) {
  sample_state().save(dir_ / "a.ckpt");
  const std::string bytes = read_bytes(dir_ / "a.ckpt");
  std::mt19937 rng(5);
  for (size_t i = 0; i < bytes.size(); ++i) {
    SCOPED_TRACE(i);
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ (1 + rng() % 255));
    write_bytes(dir_ / "flip.ckpt", damaged);
    expect_rejected(dir_ / "flip.ckpt");
  }
}

TEST_F(CheckpointTest, NamesWhatIsWrong) {
  write_bytes(dir_ / "foreign.ckpt", "PK\3\4 this is a zip file, not a checkpoint");
  expect_rejected(dir_ / "foreign.ckpt", "not a TrainRT checkpoint");
  expect_rejected(dir_ / "missing.ckpt", "cannot open");
  sample_state().save(dir_ / "a.ckpt");
  std::string bytes = read_bytes(dir_ / "a.ckpt");
  write_bytes(dir_ / "cut.ckpt", bytes.substr(0, bytes.size() - 100));
  expect_rejected(dir_ / "cut.ckpt", "truncated");
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(dir_ / "flip.ckpt", bytes);
  expect_rejected(dir_ / "flip.ckpt", "checksum mismatch");
  bytes = read_bytes(dir_ / "a.ckpt");
  bytes[8] = 2;  // format version
  write_bytes(dir_ / "v2.ckpt", bytes);
  expect_rejected(dir_ / "v2.ckpt", "format version 2 is not supported");
}

// A file whose checksum is right but whose entry table lies: the bounds checks catch it.
TEST_F(CheckpointTest, BadEntryWithValidChecksumIsRejected) {
  CheckpointState s;
  s.parameters["w"] = patterned(DType::kF32, {4}, 1);
  s.parameters["x"] = patterned(DType::kF32, {4}, 2);
  s.save(dir_ / "a.ckpt");
  const std::string good = read_bytes(dir_ / "a.ckpt");
  // First entry: 40-byte preamble, then section, field, dtype, rank, name length, offset, length.
  constexpr size_t kOffsetField = 40 + 8, kLengthField = 40 + 16, kDimField = 40 + 24;
  auto patched = [&](size_t at, uint64_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + at, &value, sizeof(value));
    const uint32_t crc = crc32c_extend(0, bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    return bytes;
  };
  uint64_t offset;
  std::memcpy(&offset, good.data() + kOffsetField, 8);
  write_bytes(dir_ / "far.ckpt", patched(kOffsetField, offset + 64 * 1000));
  expect_rejected(dir_ / "far.ckpt", "lies outside the data area");
  write_bytes(dir_ / "odd.ckpt", patched(kOffsetField, offset + 4));
  expect_rejected(dir_ / "odd.ckpt", "not 64-byte aligned");
  write_bytes(dir_ / "len.ckpt", patched(kLengthField, 20));
  expect_rejected(dir_ / "len.ckpt", "data bytes do not hold f32(4)");
  write_bytes(dir_ / "dim.ckpt", patched(kDimField, static_cast<uint64_t>(-4)));
  expect_rejected(dir_ / "dim.ckpt", "bad dims");
  write_bytes(dir_ / "overlap.ckpt", patched(kOffsetField, offset + 64));  // onto x's data
  expect_rejected(dir_ / "overlap.ckpt", "overlap");
}

TEST_F(CheckpointTest, StateWithWrongShapeForItsParameterIsRejected) {
  CheckpointState s;
  s.parameters["w"] = patterned(DType::kF32, {4}, 1);
  s.optimizer_states["w"].exp_avg = patterned(DType::kF32, {5}, 2);
  s.save(dir_ / "a.ckpt");
  expect_rejected(dir_ / "a.ckpt", "optimizer state 'exp_avg' of parameter 'w' is f32(5)");
}

TEST_F(CheckpointTest, SaveIntoMissingDirectoryThrowsAndLeavesNothing) {
  EXPECT_THROW(sample_state().save(dir_ / "no" / "such" / "dir" / "a.ckpt"), Error);
  EXPECT_FALSE(fs::exists(dir_ / "no"));
}

TEST_F(CheckpointTest, FailedRenameKeepsOldFile) {
  // The target is a non-empty directory: everything is written, then the rename fails.
  fs::create_directories(dir_ / "target.ckpt" / "inside");
  try {
    sample_state().save(dir_ / "target.ckpt");
    FAIL() << "saved over a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target.ckpt"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(dir_ / "target.ckpt" / "inside"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary left
}

// A save that fails midway (the file size limit stops the write after 4 KiB) leaves the previous
// checkpoint byte for byte as it was and removes its temporary file.
TEST_F(CheckpointTest, SaveFailingMidwayKeepsPreviousCheckpoint) {
  const fs::path path = dir_ / "model.ckpt";
  CheckpointState old_state;
  old_state.parameters["w"] = patterned(DType::kF32, {10}, 3);
  old_state.save(path);
  const std::string old_bytes = read_bytes(path);

  CheckpointState big = sample_state();
  big.parameters["big"] = patterned(DType::kF32, {1 << 16}, 4);  // 256 KiB
  rlimit saved_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  auto* previous_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG
  rlimit small = saved_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    big.save(path);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("could not write"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved_limit);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary left
  CheckpointState loaded;
  loaded.load(path);
  expect_same_state(loaded, old_state);
}

TEST_F(CheckpointTest, SaveReplacesExistingFile) {
  CheckpointState a;
  a.step = 1;
  a.save(dir_ / "c.ckpt");
  CheckpointState b = sample_state();
  b.save(dir_ / "c.ckpt");
  CheckpointState loaded;
  loaded.load(dir_ / "c.ckpt");
  expect_same_state(loaded, b);
}

TEST_F(CheckpointTest, UndefinedTensorIsRejectedOnSave) {
  CheckpointState s;
  s.parameters["ghost"] = Tensor();
  EXPECT_THROW(s.save(dir_ / "g.ckpt"), InvalidModel);
  EXPECT_FALSE(fs::exists(dir_ / "g.ckpt"));
}

}  // namespace
}  // namespace trainrt
