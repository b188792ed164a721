#include "trainrt/core/shape.h"

#include "trainrt/core/error.h"

namespace trainrt {

Shape Shape::of(const std::vector<int64_t>& concrete) {
  Shape s;
  s.dims.reserve(concrete.size());
  for (int64_t v : concrete) s.dims.emplace_back(v);
  return s;
}

bool Shape::is_static() const {
  if (!rank_known) return false;
  for (const Dim& d : dims)
    if (!d.is_static()) return false;
  return true;
}

std::vector<int64_t> Shape::concrete() const {
  TRAINRT_CHECK(is_static(), "shape ", to_string(*this), " is not static");
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) out.push_back(d.value);
  return out;
}

std::optional<int64_t> Shape::numel() const {
  if (!is_static()) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : dims) n *= d.value;
  return n;
}

std::string to_string(const Dim& d) {
  if (d.is_static()) return std::to_string(d.value);
  return d.symbol.empty() ? "?" : d.symbol;
}

std::string to_string(const Shape& s) {
  if (!s.rank_known) return "(*)";
  std::string out = "(";
  for (size_t i = 0; i < s.dims.size(); ++i) {
    if (i) out += ", ";
    out += to_string(s.dims[i]);
  }
  return out + ")";
}

std::string to_string(const std::vector<int64_t>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + ")";
}

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known) return Shape::unknown_rank();
  size_t rank = std::max(a.dims.size(), b.dims.size());
  std::vector<Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim one(1);
    const Dim& da = i < rank - a.dims.size() ? one : a.dims[i - (rank - a.dims.size())];
    const Dim& db = i < rank - b.dims.size() ? one : b.dims[i - (rank - b.dims.size())];
    if (da.is_static() && db.is_static()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        throw ShapeError(fmt("shapes ", to_string(a), " and ", to_string(b), " do not broadcast"));
      out[i] = Dim(da.value == 1 ? db.value : da.value);
    } else if (da.is_static() && da.value == 1) {
      out[i] = db;
    } else if (db.is_static() && db.value == 1) {
      out[i] = da;
    } else if (da == db) {
      out[i] = da;
    } else if (!da.is_static() && !db.is_static()) {
      out[i] = Dim();
    } else {
      out[i] = da.is_static() ? da : db;  // the dynamic one must equal the static one at run time
    }
  }
  return Shape(std::move(out));
}

std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt("shapes ", to_string(a), " and ", to_string(b), " do not broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    throw ShapeError(fmt("axis ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace trainrt
