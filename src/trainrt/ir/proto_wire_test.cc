#include "trainrt/ir/proto_wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

// Reads the first field of `bytes`, checking its number. The reader views `bytes`.
WireReader first_field(std::string_view bytes, uint32_t field) {
  WireReader r(bytes);
  EXPECT_TRUE(r.next());
  EXPECT_EQ(r.field(), field);
  return r;
}

std::string message_of(const std::string& what, const std::string& bytes) {
  try {
    WireReader r(bytes);
    while (r.next()) r.skip();
  } catch (const InvalidModel& e) {
    return e.what();
  }
  ADD_FAILURE() << what << ": no error";
  return {};
}

TEST(ProtoWire, VarintsRoundTrip) {
  const uint64_t values[] = {0, 1, 127, 128, 300, (1ull << 32) + 5, std::numeric_limits<uint64_t>::max()};
  for (uint64_t v : values) {
    WireWriter w;
    w.write_varint(3, v);
    std::string bytes = w.to_string();
    WireReader r = first_field(bytes, 3);
    EXPECT_EQ(r.wire_type(), WireType::kVarint);
    EXPECT_EQ(r.read_varint(), v);
    EXPECT_FALSE(r.next());
  }
}

TEST(ProtoWire, NegativeIntsTakeTenBytes) {
  WireWriter w;
  w.write_int64(1, -2);
  std::string bytes = w.to_string();
  EXPECT_EQ(bytes.size(), 11u);  // tag + 10 bytes, as protobuf encodes negative int64 and int32
  EXPECT_EQ(first_field(bytes, 1).read_int64(), -2);
  EXPECT_EQ(first_field(bytes, 1).read_int32(), -2);
}

TEST(ProtoWire, FixedAndBytesFields) {
  WireWriter w;
  w.write_float(2, 1.5f);
  w.write_double(3, -2.25);
  w.write_string(4, "hello");
  w.write_bytes(5, std::string("\0\1", 2));
  std::string bytes = w.to_string();
  WireReader r(bytes);
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.read_float(), 1.5f);
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.read_double(), -2.25);
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.read_string(), "hello");
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.read_bytes(), std::string_view("\0\1", 2));
  EXPECT_FALSE(r.next());
}

TEST(ProtoWire, NestedMessagesAndBorrowedBytes) {
  std::string big(1000, 'x');
  WireWriter inner;
  inner.write_string(1, "name");
  inner.write_bytes_borrowed(9, big);
  WireWriter outer;
  outer.write_varint(1, 7);
  outer.write_message(2, std::move(inner));
  EXPECT_EQ(inner.size(), 0u);
  std::string bytes = outer.to_string();
  EXPECT_EQ(bytes.size(), outer.size());
  std::ostringstream stream;
  outer.write_to(stream);
  EXPECT_EQ(stream.str(), bytes);

  WireReader r(bytes);
  ASSERT_TRUE(r.next());
  EXPECT_EQ(r.read_varint(), 7u);
  ASSERT_TRUE(r.next());
  WireReader m = r.read_message();
  EXPECT_EQ(m.depth(), 1);
  ASSERT_TRUE(m.next());
  EXPECT_EQ(m.read_string(), "name");
  ASSERT_TRUE(m.next());
  EXPECT_EQ(m.read_bytes(), big);
  EXPECT_FALSE(m.next());
  EXPECT_FALSE(r.next());
}

TEST(ProtoWire, RepeatedFieldsPackedOrNot) {
  WireWriter w;
  w.write_packed(1, std::vector<int64_t>{1, -1, 300});
  w.write_int64(1, 4);  // one more, unpacked, same field
  w.write_packed(2, std::vector<float>{0.5f, 2.f});
  w.write_float(2, 3.f);
  w.write_packed(3, std::vector<int32_t>{-7, 8});
  w.write_packed(4, std::vector<double>{1e300});
  w.write_packed(5, std::vector<int64_t>{});  // writes nothing
  std::string bytes = w.to_string();
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<int32_t> int32s;
  std::vector<double> doubles;
  WireReader r(bytes);
  while (r.next()) {
    if (r.field() == 1)
      r.read_repeated(ints);
    else if (r.field() == 2)
      r.read_repeated(floats);
    else if (r.field() == 3)
      r.read_repeated(int32s);
    else if (r.field() == 4)
      r.read_repeated(doubles);
    else
      ADD_FAILURE() << "unexpected field " << r.field();
  }
  EXPECT_EQ(ints, (std::vector<int64_t>{1, -1, 300, 4}));
  EXPECT_EQ(floats, (std::vector<float>{0.5f, 2.f, 3.f}));
  EXPECT_EQ(int32s, (std::vector<int32_t>{-7, 8}));
  EXPECT_EQ(doubles, (std::vector<double>{1e300}));
}

TEST(ProtoWire, SkipsEveryWireType) {
  WireWriter w;
  w.write_varint(1, 5);
  w.write_float(2, 1.f);
  w.write_double(3, 1.0);
  w.write_string(4, "abc");
  w.write_varint(5, 9);
  std::string bytes = w.to_string();
  WireReader r(bytes);
  int fields = 0;
  while (r.next()) {
    if (r.field() == 5)
      EXPECT_EQ(r.read_varint(), 9u);
    else
      r.skip();
    ++fields;
  }
  EXPECT_EQ(fields, 5);
}

TEST(ProtoWire, MalformedBytesThrowInvalidModel) {
  EXPECT_NE(message_of("truncated varint", "\x08\x80").find("varint runs past the end"), std::string::npos);
  EXPECT_NE(
      message_of("11-byte varint", std::string("\x08") + std::string(10, '\xff') + "\x01").find("varint"),
      std::string::npos);
  EXPECT_NE(message_of("varint overflow", std::string("\x08") + std::string(9, '\xff') + "\x02")
                .find("overflows 64 bits"),
            std::string::npos);
  EXPECT_NE(message_of("length past end",
                       "\x12\x05"
                       "ab")
                .find("length 5 runs past the end (2 bytes left)"),
            std::string::npos);
  EXPECT_NE(message_of("wire type 6", "\x0e").find("unknown wire type 6"), std::string::npos);
  EXPECT_NE(message_of("wire type 7", "\x0f").find("unknown wire type 7"), std::string::npos);
  EXPECT_NE(message_of("group", "\x0b").find("groups"), std::string::npos);
  EXPECT_NE(message_of("field 0", std::string("\x00\x01", 2)).find("invalid field number 0"),
            std::string::npos);
  EXPECT_NE(message_of("truncated fixed32", "\x0d\x01\x02").find("4-byte value runs past the end"),
            std::string::npos);
  EXPECT_NE(message_of("truncated fixed64", "\x09\x01").find("8-byte value"), std::string::npos);
}

TEST(ProtoWire, ErrorsNameTheByteOffsetAndField) {
  WireWriter w;
  w.write_varint(1, 1);
  w.write_varint(2, 2);
  std::string bytes = w.to_string() + "\x1a\x09";  // field 3, length 9, nothing after
  std::string m = message_of("offset", bytes);
  EXPECT_NE(m.find("at byte 4 (field 3)"), std::string::npos) << m;
}

TEST(ProtoWire, WrongWireTypeForAField) {
  WireWriter w;
  w.write_string(1, "abc");
  std::string bytes = w.to_string();
  WireReader r = first_field(bytes, 1);
  try {
    r.read_varint();
    FAIL() << "no error";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("wire type is length-delimited, expected varint"),
              std::string::npos);
  }
  WireWriter v;
  v.write_varint(1, 3);
  std::string vb = v.to_string();
  std::vector<float> floats;
  EXPECT_THROW(first_field(vb, 1).read_repeated(floats), InvalidModel);
}

TEST(ProtoWire, PackedFixedFieldMustBeWholeElements) {
  std::string bytes("\x12\x03\x00\x00\x80", 5);  // field 2, packed, 3 bytes: not a float count
  std::vector<float> floats;
  EXPECT_THROW(first_field(bytes, 2).read_repeated(floats), InvalidModel);
  std::vector<int64_t> ints;
  std::string varints = "\x0a\x02\x01\x80";  // packed varints, the second cut short
  EXPECT_THROW(first_field(varints, 1).read_repeated(ints), InvalidModel);
}

TEST(ProtoWire, NestingDepthIsLimited) {
  // Messages nested kMaxDepth + 1 deep, each holding only the next.
  std::string bytes;
  for (int i = 0; i <= WireReader::kMaxDepth + 1; ++i) {
    WireWriter w;
    w.write_bytes(1, bytes);
    bytes = w.to_string();
  }
  WireReader r(bytes);
  auto descend = [&] {
    WireReader cur = r;
    while (cur.next()) cur = cur.read_message();
  };
  try {
    descend();
    FAIL() << "no error";
  } catch (const InvalidModel& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than 64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainrt
