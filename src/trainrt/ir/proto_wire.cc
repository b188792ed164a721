#include "trainrt/ir/proto_wire.h"

#include <bit>
#include <cstring>

#include "trainrt/core/error.h"

namespace trainrt {

// Fixed-width fields are little-endian on the wire; we copy them as they are.
static_assert(std::endian::native == std::endian::little, "TrainRT assumes a little-endian host");

namespace {

std::string_view wire_type_name(WireType t) {
  switch (t) {
    case WireType::kVarint: return "varint";
    case WireType::kFixed64: return "fixed64";
    case WireType::kLen: return "length-delimited";
    case WireType::kFixed32: return "fixed32";
  }
  return "?";
}

}  // namespace

// ---- WireReader ----

WireReader::WireReader(std::string_view bytes, int depth, size_t base)
    : bytes_(bytes), end_(bytes.size()), base_(base), depth_(depth) {}

void WireReader::fail(std::string_view what) const {
  if (field_ == 0) throw InvalidModel(fmt("malformed protobuf at byte ", base_ + pos_, ": ", what));
  throw InvalidModel(fmt("malformed protobuf at byte ", field_offset(), " (field ", field_, "): ", what));
}

uint64_t WireReader::raw_varint() {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (pos_ >= end_) fail("varint runs past the end");
    uint8_t b = static_cast<uint8_t>(bytes_[pos_++]);
    // The tenth byte may only carry the top bit of a 64-bit value, and must be the last.
    if (shift == 63 && b > 1) fail("varint is longer than 10 bytes or overflows 64 bits");
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

template <typename T>
T WireReader::raw_fixed() {
  if (end_ - pos_ < sizeof(T))
    fail(fmt(sizeof(T), "-byte value runs past the end (", end_ - pos_, " bytes left)"));
  T v;
  std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
  pos_ += sizeof(T);
  return v;
}

bool WireReader::next() {
  if (pos_ >= bytes_.size()) return false;
  tag_pos_ = pos_;
  field_ = 0;  // so that a bad tag reports the offset, not a stale field
  uint64_t tag = raw_varint();
  uint64_t field = tag >> 3;
  uint32_t type = static_cast<uint32_t>(tag & 7);
  if (field == 0 || field > 0x1fffffff) fail(fmt("invalid field number ", field));
  field_ = static_cast<uint32_t>(field);
  if (type == 3 || type == 4) fail("groups (wire types 3 and 4) are not used by ONNX");
  if (type > 5) fail(fmt("unknown wire type ", type));
  type_ = static_cast<WireType>(type);
  return true;
}

void WireReader::expect(WireType t) const {
  if (type_ != t) fail(fmt("wire type is ", wire_type_name(type_), ", expected ", wire_type_name(t)));
}

uint64_t WireReader::read_varint() {
  expect(WireType::kVarint);
  return raw_varint();
}

float WireReader::read_float() {
  expect(WireType::kFixed32);
  return raw_fixed<float>();
}

double WireReader::read_double() {
  expect(WireType::kFixed64);
  return raw_fixed<double>();
}

std::string_view WireReader::read_bytes() {
  expect(WireType::kLen);
  uint64_t n = raw_varint();
  size_t left = bytes_.size() - pos_;
  if (n > left) fail(fmt("length ", n, " runs past the end (", left, " bytes left)"));
  std::string_view out = bytes_.substr(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return out;
}

WireReader WireReader::read_message() {
  if (depth_ + 1 > kMaxDepth) fail(fmt("messages nest deeper than ", kMaxDepth, " levels"));
  std::string_view body = read_bytes();
  size_t body_base = base_ + static_cast<size_t>(body.data() - bytes_.data());
  return WireReader(body, depth_ + 1, body_base);
}

void WireReader::skip() {
  switch (type_) {
    case WireType::kVarint: raw_varint(); break;
    case WireType::kFixed64: raw_fixed<uint64_t>(); break;
    case WireType::kFixed32: raw_fixed<uint32_t>(); break;
    case WireType::kLen: read_bytes(); break;
  }
}

template <typename T, typename Read>
void WireReader::read_repeated_with(std::vector<T>& out, WireType element_type, Read read_one) {
  if (type_ == element_type) {
    out.push_back(read_one());
    return;
  }
  if (type_ != WireType::kLen)
    fail(fmt("wire type is ", wire_type_name(type_), ", expected ", wire_type_name(element_type),
             " or packed"));
  std::string_view packed = read_bytes();
  if (element_type != WireType::kVarint) {
    size_t width = element_type == WireType::kFixed32 ? 4 : 8;
    if (packed.size() % width)
      fail(fmt("packed field of ", packed.size(), " bytes is not a multiple of ", width));
    out.reserve(out.size() + packed.size() / width);
  }
  // Parse the elements in place: rewind to the packed bytes and stop at their end.
  size_t packed_end = pos_;
  pos_ -= packed.size();
  end_ = packed_end;
  while (pos_ < packed_end) out.push_back(read_one());
  end_ = bytes_.size();
}

void WireReader::read_repeated(std::vector<int64_t>& out) {
  read_repeated_with(out, WireType::kVarint, [&] { return static_cast<int64_t>(raw_varint()); });
}
void WireReader::read_repeated(std::vector<int32_t>& out) {
  read_repeated_with(out, WireType::kVarint, [&] { return static_cast<int32_t>(raw_varint()); });
}
void WireReader::read_repeated(std::vector<uint64_t>& out) {
  read_repeated_with(out, WireType::kVarint, [&] { return raw_varint(); });
}
void WireReader::read_repeated(std::vector<float>& out) {
  read_repeated_with(out, WireType::kFixed32, [&] { return raw_fixed<float>(); });
}
void WireReader::read_repeated(std::vector<double>& out) {
  read_repeated_with(out, WireType::kFixed64, [&] { return raw_fixed<double>(); });
}

// ---- WireWriter ----

void WireWriter::put_raw(const void* p, size_t n) {
  if (n == 0) return;
  // Small writes append to the last owned piece; a borrowed piece closes it.
  if (pieces_.empty() || !pieces_.back().borrowed.empty()) pieces_.push_back({});
  pieces_.back().owned.append(static_cast<const char*>(p), n);
  size_ += n;
}

void WireWriter::put_varint(uint64_t v) {
  char buf[10];
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  put_raw(buf, n);
}

void WireWriter::tag(uint32_t field, WireType t) {
  put_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(t));
}

void WireWriter::write_varint(uint32_t field, uint64_t v) {
  tag(field, WireType::kVarint);
  put_varint(v);
}

void WireWriter::write_float(uint32_t field, float v) {
  tag(field, WireType::kFixed32);
  put_raw(&v, 4);
}

void WireWriter::write_double(uint32_t field, double v) {
  tag(field, WireType::kFixed64);
  put_raw(&v, 8);
}

void WireWriter::write_bytes(uint32_t field, std::string_view bytes) {
  tag(field, WireType::kLen);
  put_varint(bytes.size());
  put_raw(bytes.data(), bytes.size());
}

void WireWriter::write_bytes_borrowed(uint32_t field, std::string_view bytes) {
  tag(field, WireType::kLen);
  put_varint(bytes.size());
  if (bytes.empty()) return;
  pieces_.push_back({std::string(), bytes});
  size_ += bytes.size();
}

void WireWriter::write_message(uint32_t field, WireWriter&& message) {
  tag(field, WireType::kLen);
  put_varint(message.size_);
  for (Piece& p : message.pieces_) pieces_.push_back(std::move(p));
  size_ += message.size_;
  message.pieces_.clear();
  message.size_ = 0;
}

void WireWriter::write_packed(uint32_t field, const std::vector<int64_t>& v) {
  if (v.empty()) return;
  WireWriter body;
  for (int64_t x : v) body.put_varint(static_cast<uint64_t>(x));
  write_message(field, std::move(body));
}

void WireWriter::write_packed(uint32_t field, const std::vector<int32_t>& v) {
  if (v.empty()) return;
  WireWriter body;
  // int32 is sign-extended to 64 bits on the wire, as protobuf does.
  for (int32_t x : v) body.put_varint(static_cast<uint64_t>(static_cast<int64_t>(x)));
  write_message(field, std::move(body));
}

void WireWriter::write_packed(uint32_t field, const std::vector<float>& v) {
  if (v.empty()) return;
  tag(field, WireType::kLen);
  put_varint(v.size() * 4);
  put_raw(v.data(), v.size() * 4);
}

void WireWriter::write_packed(uint32_t field, const std::vector<double>& v) {
  if (v.empty()) return;
  tag(field, WireType::kLen);
  put_varint(v.size() * 8);
  put_raw(v.data(), v.size() * 8);
}

std::string WireWriter::to_string() const {
  std::string out;
  out.reserve(size_);
  for (const Piece& p : pieces_) out.append(p.bytes());
  return out;
}

void WireWriter::write_to(std::ostream& out) const {
  for (const Piece& p : pieces_) {
    std::string_view b = p.bytes();
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  }
}

}  // namespace trainrt
