// The protobuf wire format, small and bounds-checked: what the ONNX import and export speak.
//
// TrainRT does not link libprotobuf: torch's and onnx's Python extensions already put their own
// protobuf symbols into the process, and a third version beside them risks symbol clashes. ONNX needs
// only a few wire types, so we read and write them here (protobuf.dev "Encoding").
//
// WireReader walks one message's fields. Every read checks the bounds and the wire type the caller
// expects, and nested messages count their depth, so malformed or hostile bytes throw InvalidModel
// (naming the byte offset and field) instead of crashing or recursing without end.
//
//   WireReader r(bytes);
//   while (r.next()) {
//     if (r.field() == 1) name = r.read_string();
//     else if (r.field() == 2) dims.push_back(r.read_int64());
//     else r.skip();
//   }
//
// WireWriter builds a message as a list of pieces, so large tensor bytes are borrowed, not copied,
// until the message is written out once (to a string or a stream).
//
//   WireWriter w;
//   w.write_string(1, "x");
//   w.write_bytes_borrowed(9, raw);   // `raw` must outlive `w`
//   std::string bytes = w.to_string();
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

class WireReader {
 public:
  // Messages nest at most this deep. ONNX needs about 8 levels; the limit keeps hostile input
  // from exhausting the stack of a recursive decoder.
  static constexpr int kMaxDepth = 64;

  // `base` is the offset of `bytes` inside the outermost message, for error messages.
  explicit WireReader(std::string_view bytes, int depth = 0, size_t base = 0);

  // Reads the next field's tag; false at the end of the message.
  bool next();
  uint32_t field() const { return field_; }
  WireType wire_type() const { return type_; }
  // Absolute offset of the current field's tag, for error messages.
  size_t field_offset() const { return base_ + tag_pos_; }
  int depth() const { return depth_; }

  // Scalar reads of the current field; each checks the field's wire type.
  uint64_t read_varint();
  int64_t read_int64() { return static_cast<int64_t>(read_varint()); }
  int32_t read_int32() { return static_cast<int32_t>(read_varint()); }
  float read_float();    // fixed32
  double read_double();  // fixed64
  std::string_view read_bytes();
  std::string read_string() { return std::string(read_bytes()); }
  // A nested message: a reader over its bytes, one level deeper.
  WireReader read_message();
  void skip();

  // Repeated scalars arrive packed (one length-delimited field) or one per field; these accept
  // both and append to `out`.
  void read_repeated(std::vector<int64_t>& out);
  void read_repeated(std::vector<int32_t>& out);
  void read_repeated(std::vector<uint64_t>& out);
  void read_repeated(std::vector<float>& out);
  void read_repeated(std::vector<double>& out);

  // Throws InvalidModel "malformed protobuf at byte N (field F): what".
  [[noreturn]] void fail(std::string_view what) const;

 private:
  void expect(WireType t) const;
  uint64_t raw_varint();
  template <typename T>
  T raw_fixed();
  template <typename T, typename Read>
  void read_repeated_with(std::vector<T>& out, WireType element_type, Read read_one);

  std::string_view bytes_;
  size_t end_ = 0;  // bytes_.size(), or the end of a packed field being read
  size_t pos_ = 0;
  size_t tag_pos_ = 0;
  size_t base_ = 0;
  int depth_ = 0;
  uint32_t field_ = 0;
  WireType type_ = WireType::kVarint;
};

class WireWriter {
 public:
  void write_varint(uint32_t field, uint64_t v);
  void write_int64(uint32_t field, int64_t v) { write_varint(field, static_cast<uint64_t>(v)); }
  void write_float(uint32_t field, float v);
  void write_double(uint32_t field, double v);
  void write_bytes(uint32_t field, std::string_view bytes);
  void write_string(uint32_t field, std::string_view s) { write_bytes(field, s); }
  // Like write_bytes, but keeps a view: `bytes` must stay alive until the writer is written out.
  void write_bytes_borrowed(uint32_t field, std::string_view bytes);
  // Appends `message` as a nested message field (moves its pieces, copies no borrowed bytes).
  void write_message(uint32_t field, WireWriter&& message);

  // Packed repeated fields (nothing is written for an empty list, as protobuf does).
  void write_packed(uint32_t field, const std::vector<int64_t>& v);
  void write_packed(uint32_t field, const std::vector<int32_t>& v);
  void write_packed(uint32_t field, const std::vector<float>& v);
  void write_packed(uint32_t field, const std::vector<double>& v);

  size_t size() const { return size_; }
  std::string to_string() const;
  void write_to(std::ostream& out) const;

 private:
  struct Piece {
    std::string owned;
    std::string_view borrowed;  // a borrowed piece has an empty `owned`
    std::string_view bytes() const { return owned.empty() ? borrowed : owned; }
  };
  void tag(uint32_t field, WireType t);
  void put_varint(uint64_t v);
  void put_raw(const void* p, size_t n);

  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

}  // namespace trainrt
