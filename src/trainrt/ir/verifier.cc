#include "trainrt/ir/verifier.h"

#include <cstdint>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/core/error.h"

namespace trainrt {

namespace {

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g) {
    nodes_ = g.nodes();
    node_set_.insert(nodes_.begin(), nodes_.end());
  }

  std::vector<std::string> run() {
    check_graph_inputs();
    for (Value* v : g_.initializers()) {
      check_value(v, "initializer");
      if (v->producer)
        problem(fmt("initializer '", v->name, "' is also produced by ", v->producer->describe()));
    }
    check_nodes();
    check_graph_outputs();
    // A cycle is only meaningful once the links are consistent.
    if (count_ == 0) {
      try {
        g_.topological_order();
      } catch (const InvalidModel& e) {
        problem(e.what());
      }
    }
    if (count_ > kMaxVerifierProblems)
      problems_.push_back(fmt("(", count_ - kMaxVerifierProblems, " more problems not shown)"));
    return std::move(problems_);
  }

 private:
  void problem(std::string what) {
    if (count_++ < kMaxVerifierProblems) problems_.push_back(std::move(what));
  }

  static std::pair<std::uintptr_t, int> use_key(const Node* n, int input_index) {
    return {reinterpret_cast<std::uintptr_t>(n), input_index};
  }

  bool defined(const Value* v) const {
    return graph_inputs_.count(v) || v->is_initializer() || (v->producer && node_set_.count(v->producer));
  }

  // Name, ownership and use links of a value seen from anywhere in the graph.
  void check_value(const Value* v, std::string_view role) {
    if (!checked_.insert(v).second) return;
    if (v->name.empty()) {
      problem(fmt("a ", role, " has an empty name"));
      return;
    }
    if (g_.find_value(v->name) != v) {
      problem(fmt(role, " '", v->name, "' is not the value of that name in this graph"));
      return;
    }
    for (const Use& u : v->uses) {
      if (!node_set_.count(u.node))
        problem(fmt("value '", v->name, "' lists a use by a node that is not in the graph"));
      else if (u.node->input(u.input_index) != v)
        problem(fmt("value '", v->name, "' lists a use as input ", u.input_index, " of ", u.node->describe(),
                    ", which reads something else there"));
      else if (!listed_uses_.insert(use_key(u.node, u.input_index)).second)
        problem(fmt("value '", v->name, "' lists its use as input ", u.input_index, " of ",
                    u.node->describe(), " twice"));
    }
  }

  void check_graph_inputs() {
    for (Value* v : g_.inputs()) {
      if (!v) {
        problem("a graph input is null");
        continue;
      }
      if (!graph_inputs_.insert(v).second) problem(fmt("graph input '", v->name, "' is listed twice"));
      check_value(v, "graph input");
      if (v->producer)
        problem(fmt("graph input '", v->name, "' is also produced by ", v->producer->describe()));
    }
  }

  void check_node_inputs(const Node* n) {
    for (int i = 0; i < n->num_inputs(); ++i) {
      const Value* v = n->input(i);
      if (!v) continue;  // an omitted optional input
      check_value(v, "value");
      if (!defined(v))
        problem(fmt(n->describe(), ": input ", i, " '", v->name,
                    "' is not defined (not a graph input, an initializer or a node output)"));
      // check_value(v) has recorded v's uses.
      if (!listed_uses_.count(use_key(n, i)))
        problem(fmt(n->describe(), ": input ", i, " '", v->name, "' does not list this node as a use"));
    }
  }

  void check_node_outputs(const Node* n) {
    for (int i = 0; i < n->num_outputs(); ++i) {
      const Value* v = n->output(i);
      if (!v) continue;  // an omitted optional output
      check_value(v, "value");
      if (v->producer != n || v->producer_output != i) {
        std::string other = v->producer ? v->producer->describe() : std::string("no node");
        problem(fmt(n->describe(), ": output ", i, " '", v->name, "' is recorded as produced by ", other));
      }
      if (graph_inputs_.count(v))
        problem(fmt(n->describe(), ": output '", v->name, "' is also a graph input"));
      if (v->is_initializer()) problem(fmt(n->describe(), ": output '", v->name, "' is also an initializer"));
    }
  }

  void check_nodes() {
    std::unordered_map<std::string, const Node*> by_name;
    for (const Node* n : nodes_) {
      if (&n->graph() != &g_) problem(fmt(n->describe(), " belongs to another graph"));
      if (n->name().empty()) {
        problem(fmt("a ", n->op_type(), " node has an empty name"));
      } else {
        auto [it, fresh] = by_name.emplace(n->name(), n);
        if (!fresh)
          problem(fmt("node name '", n->name(), "' is used by two nodes (", it->second->op_type(), " and ",
                      n->op_type(), ")"));
      }
      check_node_inputs(n);
      check_node_outputs(n);
    }
  }

  void check_graph_outputs() {
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      const Value* v = g_.outputs()[i];
      if (!v) {
        problem(fmt("graph output #", i, " is null"));
        continue;
      }
      check_value(v, "graph output");
      if (!defined(v))
        problem(fmt("graph output '", v->name,
                    "' is not defined (not a graph input, an initializer or a node output)"));
    }
  }

  const Graph& g_;
  std::vector<Node*> nodes_;
  std::unordered_set<const Node*> node_set_;
  std::unordered_set<const Value*> graph_inputs_;
  std::unordered_set<const Value*> checked_;
  // (node address, input index) of every use that values list; addresses as integers so that
  // ordering unrelated pointers is well defined.
  std::set<std::pair<std::uintptr_t, int>> listed_uses_;
  std::vector<std::string> problems_;
  size_t count_ = 0;
};

}  // namespace

std::vector<std::string> verify_problems(const Graph& g) { return Verifier(g).run(); }

void verify(const Graph& g) {
  std::vector<std::string> problems = verify_problems(g);
  if (problems.empty()) return;
  std::string message = fmt("graph '", g.name, "' is not valid:");
  for (const std::string& p : problems) message += "\n  " + p;
  throw InvalidModel(message);
}

}  // namespace trainrt
