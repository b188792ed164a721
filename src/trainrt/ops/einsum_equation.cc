#include "trainrt/ops/einsum_equation.h"

#include <algorithm>
#include <cctype>

#include "trainrt/core/error.h"

namespace trainrt {
namespace {

constexpr int kLetters = 52;

int letter_label(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + (c - 'A') : -1; }
char label_letter(int label) { return static_cast<char>(label < 26 ? 'a' + label : 'A' + (label - 26)); }

// A term's letters and where its ellipsis is (-1: none): "b...ij" -> {b, i, j}, 1.
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

Term parse_term(const std::string& where, const std::string& text) {
  Term t;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "...") == 0) {
      if (t.ellipsis_at >= 0) throw InvalidModel(fmt(where, ": term '", text, "' has two ellipses"));
      t.ellipsis_at = static_cast<int>(t.letters.size());
      i += 2;
      continue;
    }
    const int label = letter_label(text[i]);
    if (label < 0) throw InvalidModel(fmt(where, ": '", text[i], "' in term '", text, "' is not a letter"));
    t.letters.push_back(label);
  }
  return t;
}

// The term's labels for an operand of `rank` dims whose ellipsis covers the last of `ellipsis_dims` ids.
std::vector<int> expand(const Term& t, int64_t rank, int ellipsis_dims) {
  std::vector<int> labels(t.letters.begin(), t.letters.end());
  if (t.ellipsis_at < 0) return labels;
  const int covered = static_cast<int>(rank) - static_cast<int>(t.letters.size());
  std::vector<int> dots;
  for (int d = ellipsis_dims - covered; d < ellipsis_dims; ++d) dots.push_back(kLetters + d);
  labels.insert(labels.begin() + t.ellipsis_at, dots.begin(), dots.end());
  return labels;
}

}  // namespace

EinsumEquation parse_einsum(const std::string& where, const std::string& equation, const std::vector<int64_t>& ranks) {
  std::string text;
  for (char c : equation)
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  const size_t arrow = text.find("->");
  const std::string lhs = text.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t begin = 0;;) {
    const size_t comma = lhs.find(',', begin);
    terms.push_back(parse_term(where, lhs.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (terms.size() != ranks.size())
    throw InvalidModel(fmt(where, ": equation '", equation, "' has ", terms.size(), " operand terms for ", ranks.size(),
                           " inputs"));
  int ellipsis_dims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t letters = static_cast<int64_t>(terms[i].letters.size());
    if (terms[i].ellipsis_at < 0 ? ranks[i] != letters : ranks[i] < letters)
      throw InvalidModel(fmt(where, ": term ", i, " of '", equation, "' names ", letters, " axes",
                             terms[i].ellipsis_at >= 0 ? " and an ellipsis" : "", " for an input of rank ", ranks[i]));
    if (terms[i].ellipsis_at >= 0) ellipsis_dims = std::max<int>(ellipsis_dims, static_cast<int>(ranks[i] - letters));
  }
  EinsumEquation e;
  e.num_labels = kLetters + ellipsis_dims;
  e.ellipsis_label.assign(static_cast<size_t>(e.num_labels), false);
  for (int d = 0; d < ellipsis_dims; ++d) e.ellipsis_label[static_cast<size_t>(kLetters + d)] = true;
  std::vector<int> uses(static_cast<size_t>(e.num_labels), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    e.operands.push_back(expand(terms[i], ranks[i], ellipsis_dims));
    for (int l : terms[i].letters) ++uses[static_cast<size_t>(l)];
  }
  if (arrow == std::string::npos) {  // implicit: the ellipsis dims, then the letters used once, A-Z a-z
    for (int d = 0; d < ellipsis_dims; ++d) e.output.push_back(kLetters + d);
    for (int i = 0; i < kLetters; ++i) {
      const int l = (i + 26) % kLetters;  // uppercase (ids 26..51) sort before lowercase, as in ASCII
      if (uses[static_cast<size_t>(l)] == 1) e.output.push_back(l);
    }
    return e;
  }
  const Term out = parse_term(where, text.substr(arrow + 2));
  if (out.ellipsis_at >= 0 || ellipsis_dims == 0) {
    e.output = expand(out, static_cast<int64_t>(out.letters.size()) + (out.ellipsis_at >= 0 ? ellipsis_dims : 0),
                      ellipsis_dims);
  } else {
    throw InvalidModel(fmt(where, ": the inputs of '", equation, "' have ellipsis dims but the output has no '...' for them"));
  }
  for (size_t i = 0; i < out.letters.size(); ++i) {
    const int l = out.letters[i];
    if (uses[static_cast<size_t>(l)] == 0)
      throw InvalidModel(fmt(where, ": output label '", label_letter(l), "' of '", equation, "' is in no input"));
    if (std::count(out.letters.begin(), out.letters.end(), l) > 1)
      throw InvalidModel(fmt(where, ": output label '", label_letter(l), "' of '", equation, "' is repeated"));
  }
  return e;
}

std::string to_equation(const EinsumEquation& e, const std::vector<std::vector<int>>& operands,
                        const std::vector<int>& output) {
  auto term = [&](const std::vector<int>& labels) {
    std::string s;
    bool dots = false;
    for (int l : labels) {
      if (!e.ellipsis_label[static_cast<size_t>(l)]) s += label_letter(l);
      else if (!dots) s += "...", dots = true;
    }
    return s;
  };
  std::string s;
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? "," : "") + term(operands[i]);
  return s + "->" + term(output);
}

std::vector<int64_t> label_sizes(const std::string& where, const EinsumEquation& e,
                                 const std::vector<std::vector<int64_t>>& dims) {
  std::vector<int64_t> size(static_cast<size_t>(e.num_labels), -2);  // -2: not seen
  for (size_t i = 0; i < e.operands.size(); ++i) {
    for (size_t a = 0; a < e.operands[i].size(); ++a) {
      const int l = e.operands[i][a];
      const int64_t d = dims[i][a];
      int64_t& s = size[static_cast<size_t>(l)];
      const bool broadcasts = e.ellipsis_label[static_cast<size_t>(l)];
      if (s == -2 || s == -1 || (broadcasts && s == 1)) {
        if (!(s == -1 && d == 1 && broadcasts)) s = d;
      } else if (d >= 0 && d != s && !(broadcasts && d == 1)) {
        throw ShapeError(fmt(where, ": axis ", a, " of input ", i, " has ", d, " elements, another input's axis of the "
                             "same label ", s));
      }
    }
  }
  for (int64_t& s : size)
    if (s == -2) s = 1;
  return size;
}

}  // namespace trainrt
