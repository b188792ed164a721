// Field numbers follow onnx.proto (onnx 1.23). Unknown fields are skipped, as protobuf does.
#include "trainrt/ir/onnx_messages.h"

namespace trainrt::onnx {

namespace {

// ---- decoding ----

StringStringEntryProto decode_entry(WireReader r) {
  StringStringEntryProto e;
  while (r.next()) {
    if (r.field() == 1)
      e.key = r.read_string();
    else if (r.field() == 2)
      e.value = r.read_string();
    else
      r.skip();
  }
  return e;
}

OperatorSetIdProto decode_opset(WireReader r) {
  OperatorSetIdProto o;
  while (r.next()) {
    if (r.field() == 1)
      o.domain = r.read_string();
    else if (r.field() == 2)
      o.version = r.read_int64();
    else
      r.skip();
  }
  return o;
}

void decode_tensor_into(WireReader r, TensorProto& t) {
  while (r.next()) {
    switch (r.field()) {
      case 1: r.read_repeated(t.dims); break;
      case 2: t.data_type = r.read_int32(); break;
      case 3:
        t.has_segment = true;
        r.skip();
        break;
      case 4: r.read_repeated(t.float_data); break;
      case 5: r.read_repeated(t.int32_data); break;
      case 7: r.read_repeated(t.int64_data); break;
      case 8: t.name = r.read_string(); break;
      case 9:
        t.raw_data = r.read_bytes();
        t.has_raw_data = true;
        break;
      case 10: r.read_repeated(t.double_data); break;
      case 13: t.external_data.push_back(decode_entry(r.read_message())); break;
      case 14: t.data_location = r.read_int32(); break;
      default: r.skip(); break;
    }
  }
}

DimensionProto decode_dimension(WireReader r) {
  DimensionProto d;
  while (r.next()) {
    if (r.field() == 1) {
      d.value = r.read_int64();
      d.has_value = true;
    } else if (r.field() == 2) {
      d.param = r.read_string();
    } else {
      r.skip();
    }
  }
  return d;
}

void decode_tensor_type(WireReader r, TypeProto& type) {
  while (r.next()) {
    if (r.field() == 1) {
      type.elem_type = r.read_int32();
    } else if (r.field() == 2) {
      type.has_shape = true;
      WireReader shape = r.read_message();
      while (shape.next()) {
        if (shape.field() == 1)
          type.dims.push_back(decode_dimension(shape.read_message()));
        else
          shape.skip();
      }
    } else {
      r.skip();
    }
  }
}

TypeProto decode_type(WireReader r) {
  TypeProto type;
  while (r.next()) {
    switch (r.field()) {
      case 1:
        type.kind = TypeProto::Kind::kTensor;
        decode_tensor_type(r.read_message(), type);
        break;
      case 4:
        type.kind = TypeProto::Kind::kSequence;
        r.skip();
        break;
      case 5:
        type.kind = TypeProto::Kind::kMap;
        r.skip();
        break;
      case 7:
        type.kind = TypeProto::Kind::kOpaque;
        r.skip();
        break;
      case 8:
        type.kind = TypeProto::Kind::kSparseTensor;
        r.skip();
        break;
      case 9:
        type.kind = TypeProto::Kind::kOptional;
        r.skip();
        break;
      default: r.skip(); break;
    }
  }
  return type;
}

ValueInfoProto decode_value_info(WireReader r) {
  ValueInfoProto v;
  while (r.next()) {
    if (r.field() == 1)
      v.name = r.read_string();
    else if (r.field() == 2)
      v.type = decode_type(r.read_message());
    else
      r.skip();
  }
  return v;
}

void decode_graph_into(WireReader r, GraphProto& g);
WireWriter encode_graph(const GraphProto& g);

// Reads one value field of an attribute; returns the attribute type that field implies.
int32_t decode_attribute_value(WireReader& r, AttributeProto& a) {
  switch (r.field()) {
    case 2: a.f = r.read_float(); return kAttrFloat;
    case 3: a.i = r.read_int64(); return kAttrInt;
    case 4: a.s = r.read_string(); return kAttrString;
    case 5: decode_tensor_into(r.read_message(), a.t); return kAttrTensor;
    case 7: r.read_repeated(a.floats); return kAttrFloats;
    case 8: r.read_repeated(a.ints); return kAttrInts;
    case 9: a.strings.push_back(r.read_string()); return kAttrStrings;
    // Not modelled: the importer refuses them by name.
    case 6:
      if (!a.g) a.g = std::make_shared<GraphProto>();
      with_context([] { return "graph"; }, [&] { decode_graph_into(r.read_message(), *a.g); });
      return kAttrGraph;
    case 10: r.skip(); return kAttrTensors;
    case 11: r.skip(); return kAttrGraphs;
    case 14: r.skip(); return kAttrTypeProto;
    case 15: r.skip(); return kAttrTypeProtos;
    case 22: r.skip(); return kAttrSparseTensor;
    case 23: r.skip(); return kAttrSparseTensors;
    default: r.skip(); return kAttrUndefined;
  }
}

void decode_attribute_into(WireReader r, AttributeProto& a) {
  int32_t seen = kAttrUndefined;  // IR version 1 models have no `type` field
  while (r.next()) {
    if (r.field() == 1) {
      a.name = r.read_string();
    } else if (r.field() == 20) {
      a.type = r.read_int32();
    } else if (r.field() == 21) {
      a.ref_attr_name = r.read_string();
    } else {
      int32_t implied = decode_attribute_value(r, a);
      if (implied != kAttrUndefined) seen = implied;
    }
  }
  if (a.type == kAttrUndefined) a.type = seen;
}

// Decodes one attribute into `attrs`, naming it (as far as it was read) when it is malformed.
void decode_attribute_at(WireReader& r, std::vector<AttributeProto>& attrs) {
  AttributeProto& a = attrs.emplace_back();
  with_context(
      [&] { return fmt("attribute #", attrs.size() - 1, a.name.empty() ? "" : " '" + a.name + "'"); },
      [&] { decode_attribute_into(r.read_message(), a); });
}

void decode_node_into(WireReader r, NodeProto& n) {
  while (r.next()) {
    switch (r.field()) {
      case 1: n.input.push_back(r.read_string()); break;
      case 2: n.output.push_back(r.read_string()); break;
      case 3: n.name = r.read_string(); break;
      case 4: n.op_type = r.read_string(); break;
      case 5: decode_attribute_at(r, n.attribute); break;
      case 7: n.domain = r.read_string(); break;
      case 8: n.overload = r.read_string(); break;
      default: r.skip(); break;
    }
  }
}

// Decodes one node of a graph or function body, naming it as far as it was read when it is
// malformed: "node #3 'conv1' (Conv)".
void decode_node_at(WireReader& r, std::vector<NodeProto>& nodes) {
  NodeProto& n = nodes.emplace_back();
  with_context(
      [&] {
        return fmt("node #", nodes.size() - 1, n.name.empty() ? "" : " '" + n.name + "'",
                   n.op_type.empty() ? "" : " (" + n.op_type + ")");
      },
      [&] { decode_node_into(r.read_message(), n); });
}

void decode_tensor_at(WireReader& r, std::vector<TensorProto>& tensors, const char* what) {
  TensorProto& t = tensors.emplace_back();
  with_context([&] { return fmt(what, " #", tensors.size() - 1, t.name.empty() ? "" : " '" + t.name + "'"); },
               [&] { decode_tensor_into(r.read_message(), t); });
}

void decode_value_info_at(WireReader& r, std::vector<ValueInfoProto>& infos, const char* what) {
  size_t index = infos.size();
  with_context([&] { return fmt(what, " #", index); },
               [&] { infos.push_back(decode_value_info(r.read_message())); });
}

// Into an existing graph: a message field seen twice is merged, as protobuf does.
void decode_graph_into(WireReader r, GraphProto& g) {
  while (r.next()) {
    switch (r.field()) {
      case 1: decode_node_at(r, g.node); break;
      case 2: g.name = r.read_string(); break;
      case 5: decode_tensor_at(r, g.initializer, "initializer"); break;
      case 10: g.doc_string = r.read_string(); break;
      case 11: decode_value_info_at(r, g.input, "graph input"); break;
      case 12: decode_value_info_at(r, g.output, "graph output"); break;
      case 13: decode_value_info_at(r, g.value_info, "value_info"); break;
      case 15:
        ++g.sparse_initializer_count;
        r.skip();
        break;
      default: r.skip(); break;
    }
  }
}

FunctionProto decode_function(WireReader r) {
  FunctionProto f;
  while (r.next()) {
    switch (r.field()) {
      case 1: f.name = r.read_string(); break;
      case 4: f.input.push_back(r.read_string()); break;
      case 5: f.output.push_back(r.read_string()); break;
      case 6: f.attribute.push_back(r.read_string()); break;
      case 7: decode_node_at(r, f.node); break;
      case 9: f.opset_import.push_back(decode_opset(r.read_message())); break;
      case 10: f.domain = r.read_string(); break;
      case 11: decode_attribute_at(r, f.attribute_proto); break;
      case 12: decode_value_info_at(r, f.value_info, "value_info"); break;
      case 13: f.overload = r.read_string(); break;
      default: r.skip(); break;
    }
  }
  return f;
}

// ---- encoding ----

WireWriter encode_entry(const StringStringEntryProto& e) {
  WireWriter w;
  w.write_string(1, e.key);
  w.write_string(2, e.value);
  return w;
}

WireWriter encode_opset(const OperatorSetIdProto& o) {
  WireWriter w;
  if (!o.domain.empty()) w.write_string(1, o.domain);
  w.write_int64(2, o.version);
  return w;
}

WireWriter encode_type(const TypeProto& type) {
  WireWriter tensor;
  tensor.write_int64(1, type.elem_type);
  if (type.has_shape) {
    WireWriter shape;
    for (const DimensionProto& d : type.dims) {
      WireWriter dim;
      if (d.has_value)
        dim.write_int64(1, d.value);
      else if (!d.param.empty())
        dim.write_string(2, d.param);
      shape.write_message(1, std::move(dim));
    }
    tensor.write_message(2, std::move(shape));
  }
  WireWriter w;
  w.write_message(1, std::move(tensor));
  return w;
}

WireWriter encode_value_info(const ValueInfoProto& v) {
  WireWriter w;
  w.write_string(1, v.name);
  // Only tensor types are modelled; a value without a known type is written without one.
  if (v.type.kind == TypeProto::Kind::kTensor) w.write_message(2, encode_type(v.type));
  return w;
}

WireWriter encode_attribute(const AttributeProto& a) {
  WireWriter w;
  w.write_string(1, a.name);
  if (!a.ref_attr_name.empty()) w.write_string(21, a.ref_attr_name);
  w.write_int64(20, a.type);
  if (!a.ref_attr_name.empty()) return w;
  switch (a.type) {
    case kAttrFloat: w.write_float(2, a.f); break;
    case kAttrInt: w.write_int64(3, a.i); break;
    case kAttrString: w.write_string(4, a.s); break;
    case kAttrTensor: w.write_message(5, encode_tensor(a.t)); break;
    case kAttrFloats: w.write_packed(7, a.floats); break;
    case kAttrInts: w.write_packed(8, a.ints); break;
    case kAttrStrings:
      for (const std::string& s : a.strings) w.write_string(9, s);
      break;
    case kAttrGraph:
      if (a.g) w.write_message(6, encode_graph(*a.g));
      break;
    default:  // kinds that are not modelled (lists of graphs, sparse tensors, ...) carry only their type
      break;
  }
  return w;
}

WireWriter encode_node(const NodeProto& n) {
  WireWriter w;
  for (const std::string& s : n.input) w.write_string(1, s);
  for (const std::string& s : n.output) w.write_string(2, s);
  if (!n.name.empty()) w.write_string(3, n.name);
  w.write_string(4, n.op_type);
  for (const AttributeProto& a : n.attribute) w.write_message(5, encode_attribute(a));
  if (!n.domain.empty()) w.write_string(7, n.domain);
  if (!n.overload.empty()) w.write_string(8, n.overload);
  return w;
}

WireWriter encode_graph(const GraphProto& g) {
  WireWriter w;
  for (const NodeProto& n : g.node) w.write_message(1, encode_node(n));
  w.write_string(2, g.name);
  for (const TensorProto& t : g.initializer) w.write_message(5, encode_tensor(t));
  if (!g.doc_string.empty()) w.write_string(10, g.doc_string);
  for (const ValueInfoProto& v : g.input) w.write_message(11, encode_value_info(v));
  for (const ValueInfoProto& v : g.output) w.write_message(12, encode_value_info(v));
  for (const ValueInfoProto& v : g.value_info) w.write_message(13, encode_value_info(v));
  return w;
}

WireWriter encode_function(const FunctionProto& f) {
  WireWriter w;
  w.write_string(1, f.name);
  for (const std::string& s : f.input) w.write_string(4, s);
  for (const std::string& s : f.output) w.write_string(5, s);
  for (const std::string& s : f.attribute) w.write_string(6, s);
  for (const NodeProto& n : f.node) w.write_message(7, encode_node(n));
  for (const OperatorSetIdProto& o : f.opset_import) w.write_message(9, encode_opset(o));
  w.write_string(10, f.domain);
  for (const AttributeProto& a : f.attribute_proto) w.write_message(11, encode_attribute(a));
  for (const ValueInfoProto& v : f.value_info) w.write_message(12, encode_value_info(v));
  if (!f.overload.empty()) w.write_string(13, f.overload);
  return w;
}

}  // namespace

TensorProto decode_tensor(std::string_view bytes) {
  TensorProto t;
  decode_tensor_into(WireReader(bytes), t);
  return t;
}

WireWriter encode_tensor(const TensorProto& t) {
  WireWriter w;
  w.write_packed(1, t.dims);
  w.write_int64(2, t.data_type);
  w.write_packed(4, t.float_data);
  w.write_packed(5, t.int32_data);
  w.write_packed(7, t.int64_data);
  if (!t.name.empty()) w.write_string(8, t.name);
  if (t.has_raw_data) w.write_bytes_borrowed(9, t.raw_data);
  w.write_packed(10, t.double_data);
  for (const StringStringEntryProto& e : t.external_data) w.write_message(13, encode_entry(e));
  if (t.data_location != 0) w.write_int64(14, t.data_location);
  return w;
}

ModelProto decode_model(std::string_view bytes) {
  ModelProto m;
  WireReader r(bytes);
  while (r.next()) {
    switch (r.field()) {
      case 1: m.ir_version = r.read_int64(); break;
      case 2: m.producer_name = r.read_string(); break;
      case 7:
        with_context([] { return "graph"; }, [&] { decode_graph_into(r.read_message(), m.graph); });
        m.has_graph = true;
        break;
      case 8: m.opset_import.push_back(decode_opset(r.read_message())); break;
      case 25: {
        size_t index = m.functions.size();
        with_context([&] { return fmt("function #", index); },
                     [&] { m.functions.push_back(decode_function(r.read_message())); });
        break;
      }
      default: r.skip(); break;
    }
  }
  return m;
}

WireWriter encode_model(const ModelProto& m) {
  WireWriter w;
  w.write_int64(1, m.ir_version);
  if (!m.producer_name.empty()) w.write_string(2, m.producer_name);
  if (m.has_graph) w.write_message(7, encode_graph(m.graph));
  for (const OperatorSetIdProto& o : m.opset_import) w.write_message(8, encode_opset(o));
  for (const FunctionProto& f : m.functions) w.write_message(25, encode_function(f));
  return w;
}

}  // namespace trainrt::onnx
