// Consumed outputs made and handed over in row blocks (OutputConsumer::row_block_bytes, KernelTable::
// add_row_ranges): a Gemm's output consumed right after it comes block by block, bit for bit the rows
// of the whole product, in one block of arena bytes; where a later step (or the Gemm itself) reads
// the hold input the consumer writes, the output comes whole, after that read.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "trainrt/core/testing.h"
#include "trainrt/runtime/session.h"

namespace trainrt {
namespace {

using testing::expect_close;
using testing::random_tensor;

std::shared_ptr<Graph> new_graph() {
  auto g = std::make_shared<Graph>();
  g->set_opset("", 18);
  return g;
}

// Takes output 0 in blocks of `block_bytes` (0: whole), gathers the rows it gets into `whole`,
// and zeroes the hold input after each block or whole output, as a parameter update writes it.
struct GatherRows : OutputConsumer {
  size_t block_bytes = 0;
  Tensor hold;
  Tensor whole;                            // every row that came
  std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end) of each block, in order
  int wholes = 0;

  size_t row_block_bytes(size_t) const override { return block_bytes; }
  void consume(size_t, const Tensor& value) override {
    whole = value.clone();
    ++wholes;
    zero_hold();
  }
  void consume_rows(size_t, const Tensor& rows, int64_t row_begin) override {
    ASSERT_TRUE(whole.defined());  // the test sizes it
    const size_t row_bytes = whole.nbytes() / static_cast<size_t>(whole.dim(0));
    std::memcpy(static_cast<std::byte*>(whole.raw()) + static_cast<size_t>(row_begin) * row_bytes, rows.raw(),
                rows.nbytes());
    blocks.push_back({row_begin, row_begin + rows.dim(0)});
    zero_hold();
  }
  void zero_hold() {
    if (hold.defined()) std::fill(hold.data<float>(), hold.data<float>() + hold.numel(), 0.f);
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// dw = Gemm(a, b) with the given transposes, (m, n) from (m, k) and (k, n) as stored; consumed, hold w.
struct GemmCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
};

void expect_blocks_match_whole(const GemmCase& c, size_t block_bytes, bool bitwise = true) {
  SCOPED_TRACE(::testing::Message() << "transA " << c.trans_a << " transB " << c.trans_b << " (" << c.m << ", "
                                    << c.n << ", " << c.k << ") blocks of " << block_bytes << " bytes");
  auto g = new_graph();
  std::vector<int64_t> a_dims = c.trans_a ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k};
  std::vector<int64_t> b_dims = c.trans_b ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n};
  Value* a = g->add_input("a", DType::kF32, Shape::of(a_dims));
  Value* b = g->add_input("b", DType::kF32, Shape::of(b_dims));
  g->add_input("w", DType::kF32, Shape({c.m, c.n}));
  Node* gemm = g->add_node("Gemm", {a, b}, {"dw"});
  gemm->set_attr("transA", Attribute::of_int(c.trans_a));
  gemm->set_attr("transB", Attribute::of_int(c.trans_b));
  gemm->set_attr("alpha", Attribute::of_float(0.5f));
  g->add_output(gemm->output(0));
  Tensor av = random_tensor(a_dims, 1), bv = random_tensor(b_dims, 2), wv = random_tensor({c.m, c.n}, 3);
  Tensor expected = Session(g).run({av, bv, wv})[0];

  SessionOptions options;
  options.consumed_outputs = {{"dw", "w"}};
  Session session(g, options);
  GatherRows consumer;
  consumer.block_bytes = block_bytes;
  consumer.hold = wv;
  for (int run = 0; run < 2; ++run) {  // the second run reuses the plan and its block
    consumer.whole = Tensor::zeros(DType::kF32, {c.m, c.n});
    consumer.blocks.clear();
    session.run({av, bv, wv}, &consumer);
    if (bitwise) EXPECT_TRUE(same_bits(consumer.whole, expected));
    else expect_close(consumer.whole, expected, 1e-5, 1e-6);
    // Rows a block: as many as fit, rounded down to a multiple of `align` (blocks start 64-byte aligned).
    const size_t row_bytes = 4 * static_cast<size_t>(c.n);
    const int64_t align = static_cast<int64_t>(64 / std::gcd(row_bytes, size_t{64}));
    const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(block_bytes / row_bytes) / align) * align;
    ASSERT_EQ(consumer.blocks.size(), static_cast<size_t>((c.m + rows - 1) / rows));
    for (size_t i = 0; i < consumer.blocks.size(); ++i)
      EXPECT_EQ(consumer.blocks[i], std::make_pair(static_cast<int64_t>(i) * rows,
                                                   std::min(c.m, static_cast<int64_t>(i + 1) * rows)));
    EXPECT_EQ(consumer.wholes, 0);
  }
  // The arena holds one block, not the whole product.
  EXPECT_LT(session.memory_stats().planned_arena_bytes, static_cast<size_t>(c.m * c.n * 4));
}

TEST(ConsumedRowBlocks, GemmBlocksAreTheRowsOfTheWholeProductBitForBit) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      expect_blocks_match_whole({ta, tb, 300, 96, 8}, 24 * 1024);   // 64 rows a block, 300 = 4 * 64 + 44
      // 16 rows a block, a 1-row tail. Measured: with both operands transposed, oneDNN picks another
      // kernel for one (16, 513) piece than for the (129, 256) pieces the whole product is split in
      // (gemm.h splits along N by cost), which rounds differently; every other case is bit for bit.
      expect_blocks_match_whole({ta, tb, 129, 513, 67}, 16 * 1024, !(ta && tb));
    }
  expect_blocks_match_whole({true, false, 768, 768, 512}, 128 * 1024);  // dW = dY^T X of a Linear
  expect_blocks_match_whole({false, false, 40, 4096, 16}, 8 * 1024);    // a row wider than a block: 1 row each
}

// dw = Gemm(dy, x, transA) consumed with hold w, then y = MatMul(x, w) reads w: dw comes whole after
// y, as it would without blocks (blocks before y would let the consumer zero w under MatMul).
TEST(ConsumedRowBlocks, ComeWholeAfterALaterReadOfTheHoldInput) {
  auto g = new_graph();
  Value* dy = g->add_input("dy", DType::kF32, Shape({16, 64}));
  Value* x = g->add_input("x", DType::kF32, Shape({16, 64}));
  Value* w = g->add_input("w", DType::kF32, Shape({64, 64}));
  Node* gemm = g->add_node("Gemm", {dy, x}, {"dw"});
  gemm->set_attr("transA", Attribute::of_int(1));
  g->add_output(gemm->output(0));
  g->add_output(g->add_node("MatMul", {x, w}, {"y"})->output(0));
  Tensor dyv = random_tensor({16, 64}, 4), xv = random_tensor({16, 64}, 5), wv = random_tensor({64, 64}, 6);
  std::vector<Tensor> expected = Session(g).run({dyv, xv, wv.clone()});
  SessionOptions options;
  options.consumed_outputs = {{"dw", "w"}};
  Session session(g, options);
  GatherRows consumer;
  consumer.block_bytes = 4096;
  consumer.hold = wv;
  std::vector<Tensor> out = session.run({dyv, xv, wv}, &consumer);
  EXPECT_TRUE(consumer.blocks.empty());
  EXPECT_EQ(consumer.wholes, 1);
  EXPECT_TRUE(same_bits(consumer.whole, expected[0]));
  expect_close(out[1], expected[1]);  // MatMul read w before the consumer zeroed it
}

// dw = Gemm(a, w): the product reads its own hold input, which the consumer zeroes after each block,
// so blocks would make every block after the first from zeros. It comes whole.
TEST(ConsumedRowBlocks, ComeWholeWhenTheProducerReadsTheHoldInput) {
  auto g = new_graph();
  Value* a = g->add_input("a", DType::kF32, Shape({64, 32}));
  Value* w = g->add_input("w", DType::kF32, Shape({32, 32}));
  g->add_output(g->add_node("Gemm", {a, w}, {"dw"})->output(0));
  Tensor av = random_tensor({64, 32}, 7), wv = random_tensor({32, 32}, 8);
  Tensor expected = Session(g).run({av, wv.clone()})[0];
  SessionOptions options;
  options.consumed_outputs = {{"dw", "w"}};
  Session session(g, options);
  GatherRows consumer;
  consumer.block_bytes = 1024;
  consumer.hold = wv;
  session.run({av, wv}, &consumer);
  EXPECT_TRUE(consumer.blocks.empty());
  EXPECT_TRUE(same_bits(consumer.whole, expected));
}

// One session, a consumer asking for blocks and then one that does not: a plan for each answer.
TEST(ConsumedRowBlocks, AConsumerThatTakesNoBlocksGetsTheWholeOutput) {
  auto g = new_graph();
  Value* a = g->add_input("a", DType::kF32, Shape({8, 256}));
  Value* b = g->add_input("b", DType::kF32, Shape({8, 128}));
  Node* gemm = g->add_node("Gemm", {a, b}, {"dw"});
  gemm->set_attr("transA", Attribute::of_int(1));
  g->add_output(gemm->output(0));  // (256, 128)
  Tensor av = random_tensor({8, 256}, 9), bv = random_tensor({8, 128}, 10);
  Tensor expected = Session(g).run({av, bv})[0];
  SessionOptions options;
  options.consumed_outputs = {{"dw", ""}};
  Session session(g, options);
  GatherRows blocked, whole;
  blocked.block_bytes = 8192;
  blocked.whole = Tensor::zeros(DType::kF32, {256, 128});
  session.run({av, bv}, &blocked);
  session.run({av, bv}, &whole);
  EXPECT_EQ(blocked.blocks.size(), 16u);
  EXPECT_EQ(whole.wholes, 1);
  EXPECT_TRUE(same_bits(blocked.whole, expected));
  EXPECT_TRUE(same_bits(whole.whole, expected));
  EXPECT_EQ(session.num_cached_plans(), 2);
}

}  // namespace
}  // namespace trainrt
