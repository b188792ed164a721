// Shapes with symbolic dimensions, as the IR and shape inference see them.
//
// A Dim is either static (value >= 0) or dynamic (value == -1), and a dynamic dim may carry a
// symbol ("batch", "seq") that ties equal dims together across values. A Shape may also have
// unknown rank. Runtime tensors use plain std::vector<int64_t> dims.
//
//   Shape s{{Dim::symbolic("batch"), Dim(784)}};   // (batch, 784)
//   to_string(s) == "(batch, 784)"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainrt {

struct Dim {
  int64_t value = -1;  // >= 0 when static
  std::string symbol;  // may name a dynamic dim

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit on purpose, Shape{{2, 3}}
  static Dim symbolic(std::string name) {
    Dim d;
    d.symbol = std::move(name);
    return d;
  }
  bool is_static() const { return value >= 0; }
  bool operator==(const Dim& o) const {
    return is_static() ? value == o.value : (!o.is_static() && !symbol.empty() && symbol == o.symbol);
  }
};

struct Shape {
  std::vector<Dim> dims;
  bool rank_known = true;

  Shape() = default;
  Shape(std::vector<Dim> d) : dims(std::move(d)) {}  // NOLINT
  static Shape unknown_rank() {
    Shape s;
    s.rank_known = false;
    return s;
  }
  static Shape of(const std::vector<int64_t>& concrete);

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_static() const;                    // rank known and every dim static
  std::vector<int64_t> concrete() const;     // requires is_static()
  std::optional<int64_t> numel() const;      // when static
  bool operator==(const Shape& o) const { return rank_known == o.rank_known && dims == o.dims; }
  // Whether the two are known to be the same shape: rank known, each dim static or the same symbol
  // (operator== also calls two unknown ranks equal, which says nothing about the tensors).
  bool known_equal(const Shape& o) const { return rank_known && o.rank_known && dims == o.dims; }
};

std::string to_string(const Dim& d);
std::string to_string(const Shape& s);
std::string to_string(const std::vector<int64_t>& dims);  // "(2, 3)"

int64_t numel_of(const std::vector<int64_t>& dims);

// Numpy-style multidirectional broadcast (ONNX "Broadcasting in ONNX"). Throws ShapeError naming
// both shapes when they do not broadcast. A dynamic dim against 1 or an equal symbol keeps the
// symbol; two different dynamic dims give an unnamed dynamic dim.
Shape broadcast_shapes(const Shape& a, const Shape& b);
std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// Normalizes a possibly negative axis into [0, rank); throws ShapeError when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank);

}  // namespace trainrt
