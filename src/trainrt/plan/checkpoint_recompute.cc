#include "trainrt/plan/checkpoint_recompute.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "trainrt/ops/op_schema.h"

namespace trainrt {
namespace {

bool reads_dims_only(const Node& n) {
  return n.domain() == kOnnxDomain && (n.op_type() == "Shape" || n.op_type() == "Size");
}

bool is_random(const Node& n) {
  const OpSchema* schema = OpRegistry::global().find(n.domain(), n.op_type());
  return !schema || !schema->deterministic;
}

// "<name>/recompute", or with "_1", "_2"... the first that `taken` does not hold.
std::string unique_recompute_name(const std::unordered_set<std::string>& taken, const std::string& name) {
  const std::string base = name + "/recompute";
  std::string candidate = base;
  for (int i = 1; taken.count(candidate); ++i) candidate = base + "_" + std::to_string(i);
  return candidate;
}

// One region's copies: made on demand, producers first, so their creation order is a schedule.
class RegionRecompute {
 public:
  // `forward_reads_keep`: a value forward nodes outside the region read is a region output, saved
  // (a checkpointed block: the next block's input); off, only graph outputs are (a recompute
  // subgraph made for one saved value: recompute_subgraph()).
  RegionRecompute(Graph& joint, const std::unordered_set<const Node*>& forward,
                  const std::unordered_set<std::string>& graph_outputs, std::unordered_set<const Node*> members,
                  const std::set<std::string>& kept, bool forward_reads_keep = true)
      : joint_(joint), forward_(forward), graph_outputs_(graph_outputs), members_(std::move(members)), kept_(kept),
        forward_reads_keep_(forward_reads_keep) {}

  // Rewires every backward reader of a value made inside the region to a copy; returns the copies.
  std::vector<Node*> run() {
    std::vector<Use> readers;
    for (const Node* m : members_)
      for (Value* y : m->outputs())
        if (y && !kept_.count(m->name()) && !is_region_output(y))
          for (const Use& u : y->uses)
            if (!forward_.count(u.node)) readers.push_back(u);
    for (const Use& u : readers) u.node->replace_input(u.input_index, copy_of(u.node->input(u.input_index)));
    place();
    return copies_;
  }

 private:
  bool is_region_output(const Value* v) const {
    if (graph_outputs_.count(v->name)) return true;
    return forward_reads_keep_ && std::any_of(v->uses.begin(), v->uses.end(), [&](const Use& u) {
      return forward_.count(u.node) && !members_.count(u.node) && !reads_dims_only(*u.node);
    });
  }

  // The backward's stand-in for `v`: v itself when made outside the region (or a region output),
  // else the matching output of a copy of its producer.
  Value* copy_of(Value* v) {
    if (!v || !v->producer || !members_.count(v->producer) || kept_.count(v->producer->name()) ||
        is_region_output(v))
      return v;
    if (auto it = copied_.find(v); it != copied_.end()) return it->second;
    const Node& n = *v->producer;
    std::vector<Value*> inputs;
    for (Value* in : n.inputs()) inputs.push_back(copy_of(in));
    std::vector<std::string> names;
    for (const Value* out : n.outputs()) names.push_back(out ? joint_.unique_name(out->name + "/recompute") : "");
    if (node_names_.empty())
      for (const Node* m : joint_.nodes()) node_names_.insert(m->name());
    const std::string name = unique_recompute_name(node_names_, n.name());
    node_names_.insert(name);
    Node* copy = joint_.add_node(n.op_type(), inputs, names, n.domain(), name);
    for (const auto& [key, value] : n.attrs()) copy->set_attr(key, value);
    for (int o = 0; o < n.num_outputs(); ++o) {
      if (!n.output(o)) continue;
      copy->output(o)->dtype = n.output(o)->dtype;
      copy->output(o)->shape = n.output(o)->shape;
      copied_[n.output(o)] = copy->output(o);
    }
    copies_.push_back(copy);
    return copied_.at(v);
  }

  // Each copy just before its first reader in the joint graph's order (a backward node, or a copy
  // placed already: copies are taken last made first, and a copy is made after its producers), so
  // that a value the region's backward reads late is made late: an attention's q, k and v again
  // where the attention's gradient runs, not with the MLP's recompute at the start of the layer.
  void place() {
    for (auto copy = copies_.rbegin(); copy != copies_.rend(); ++copy) {
      std::unordered_set<const Node*> reading;
      for (const Value* out : (*copy)->outputs())
        if (out)
          for (const Use& u : out->uses) reading.insert(u.node);
      const std::vector<Node*> order = joint_.nodes();
      auto first = std::find_if(order.begin(), order.end(), [&](const Node* m) { return reading.count(m) > 0; });
      if (first != order.end()) joint_.move_before(*copy, *first);
    }
  }

  Graph& joint_;
  const std::unordered_set<const Node*>& forward_;
  const std::unordered_set<std::string>& graph_outputs_;
  const std::unordered_set<const Node*> members_;
  const std::set<std::string>& kept_;
  const bool forward_reads_keep_;
  std::unordered_map<const Value*, Value*> copied_;
  std::vector<Node*> copies_;
  std::unordered_set<std::string> node_names_;  // the graph's, filled at the first copy
};

}  // namespace

std::string recompute_node_name(const Graph& g, const std::string& name) {
  std::unordered_set<std::string> taken;
  for (const Node* n : g.nodes()) taken.insert(n->name());
  return unique_recompute_name(taken, name);
}

int recompute_subgraph(Graph& joint, const GradientResult& gradients, const std::vector<const Node*>& nodes) {
  const std::unordered_set<const Node*> forward(gradients.forward_nodes.begin(), gradients.forward_nodes.end());
  const std::unordered_set<std::string> graph_outputs(gradients.forward_outputs.begin(),
                                                      gradients.forward_outputs.end());
  static const std::set<std::string> kNoneKept;
  return static_cast<int>(RegionRecompute(joint, forward, graph_outputs, {nodes.begin(), nodes.end()}, kNoneKept,
                                          /*forward_reads_keep=*/false)
                              .run()
                              .size());
}

int recompute_checkpoint_regions(Graph& joint, const GradientResult& gradients,
                                 const std::map<std::string, int>& regions, const std::set<std::string>& kept) {
  if (regions.empty()) return 0;
  const std::unordered_set<const Node*> forward(gradients.forward_nodes.begin(), gradients.forward_nodes.end());
  const std::unordered_set<std::string> graph_outputs(gradients.forward_outputs.begin(),
                                                      gradients.forward_outputs.end());
  std::map<int, std::unordered_set<const Node*>> members;
  for (const Node* n : gradients.forward_nodes)
    if (auto it = regions.find(n->name()); it != regions.end() && !is_random(*n)) members[it->second].insert(n);
  int copied = 0;
  for (auto& [region, nodes] : members)
    copied += static_cast<int>(RegionRecompute(joint, forward, graph_outputs, std::move(nodes), kept).run().size());
  return copied;
}

}  // namespace trainrt
