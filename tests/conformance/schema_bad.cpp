#include "schema_bad.h"

#include <cstring>

#include "dtypes.h"

namespace dlfuse_conformance {
namespace {

struct Bad {
  std::string name, what;
  SchemaArgs args;
};

// Outputs must come back as they went in: a refused call writes nothing.
std::string untouched(const SchemaArgs& sent, const SchemaResult& got) {
  for (size_t o = 0; o < sent.out.size() && o < got.out.size(); ++o) {
    if (!sent.out[o] || !got.out[o] || (o < sent.alias.size() && sent.alias[o] != -1)) continue;
    if (got.out[o]->nbytes() != sent.out[o]->nbytes() ||
        std::memcmp(got.out[o]->data(), sent.out[o]->data(), sent.out[o]->nbytes()) != 0)
      return "output " + std::to_string(o) + " was written by a refused call";
  }
  return "";
}

}  // namespace

std::vector<SchemaRow> bad_schema_calls(dlfuse_registry_t reg, DLDevice dev, const SchemaOp& op,
                                        const SchemaArgs& valid) {
  const dlfuse_op_schema_t& s = op.schema;
  std::vector<Bad> bad;
  {
    Bad b{"bad:too_few_inputs", "one input fewer than the schema's", valid};
    b.args.in.pop_back();
    if (!b.args.in.empty() || s.num_inputs > 0) bad.push_back(std::move(b));
  }
  {
    Bad b{"bad:too_many_inputs", "one input more than the schema's", valid};
    b.args.in.push_back(valid.in[0] ? valid.in[0] : std::nullopt);
    if (s.num_inputs > 0) bad.push_back(std::move(b));
  }
  {
    Bad b{"bad:too_many_outputs", "one output more than the schema's", valid};
    b.args.out.push_back(valid.out[0]);
    b.args.alias.push_back(-1);
    bad.push_back(std::move(b));
  }
  const DLDataType other =
      same_dtype(valid.out[0] ? valid.out[0]->dtype() : DLDataType{kDLFloat, 32, 1}, DLDataType{kDLFloat, 64, 1})
          ? DLDataType{kDLFloat, 32, 1}
          : DLDataType{kDLFloat, 64, 1};
  for (int i = 0; i < s.num_inputs && i < int(valid.in.size()); ++i) {
    const std::string n = s.inputs[i].name;
    if (!valid.in[size_t(i)]) continue;
    if (!(s.inputs[i].flags & DLFUSE_ARG_OPTIONAL)) {
      Bad b{"bad:null_" + n, "required input " + n + " NULL", valid};
      b.args.in[size_t(i)].reset();
      bad.push_back(std::move(b));
    }
    Bad d{"bad:dtype_" + n, "input " + n + " in " + dtype_name(other), valid};
    d.args.in[size_t(i)] = converted(*valid.in[size_t(i)], other, false);
    bad.push_back(std::move(d));
    Bad r{"bad:rank_" + n, "input " + n + " with " + std::to_string(DLFUSE_MAX_NDIM + 1) + " dims", valid};
    std::vector<int64_t> shape(size_t(DLFUSE_MAX_NDIM + 1 - valid.in[size_t(i)]->shape().size()), 1);
    shape.insert(shape.end(), valid.in[size_t(i)]->shape().begin(), valid.in[size_t(i)]->shape().end());
    HostTensor t = poisoned_tensor(valid.in[size_t(i)]->dtype(), shape);
    for (int64_t e = 0; e < t.numel(); ++e) t.set(e, valid.in[size_t(i)]->get(e));
    r.args.in[size_t(i)] = t;
    bad.push_back(std::move(r));
  }
  for (int o = 0; o < s.num_outputs && o < int(valid.out.size()); ++o) {
    const std::string n = s.outputs[o].name;
    if (!valid.out[size_t(o)]) continue;
    if (!(s.outputs[o].flags & DLFUSE_ARG_OPTIONAL)) {
      Bad b{"bad:null_" + n, "required output " + n + " NULL", valid};
      b.args.out[size_t(o)].reset();
      bad.push_back(std::move(b));
    }
    // One more element along the last dim than the rule gives (also for a REDUCIBLE
    // output: a bigger dim never broadcasts to the rule's).
    std::vector<int64_t> shape = valid.out[size_t(o)]->shape();
    if (shape.empty())
      shape.push_back(2);
    else
      shape.back() += 1;
    Bad b{"bad:shape_" + n, "output " + n + " at " + shape_text(shape) + ", not its rule's shape", valid};
    b.args.out[size_t(o)] = poisoned_tensor(valid.out[size_t(o)]->dtype(), shape);
    bad.push_back(std::move(b));
    // Another output that is exactly this one's view (overlapping outputs).
    for (int k = o + 1; k < s.num_outputs && k < int(valid.out.size()); ++k) {
      if (!valid.out[size_t(k)] || valid.out[size_t(k)]->shape() != valid.out[size_t(o)]->shape()) continue;
      Bad ov{"bad:overlap_" + n + "_" + s.outputs[k].name, "outputs " + n + " and " + s.outputs[k].name + " one buffer",
             valid};
      ov.args.alias[size_t(k)] = -2 - o;
      bad.push_back(std::move(ov));
      break;
    }
  }
  for (int a = 0; a < s.num_attrs && a < int(valid.attrs.size()); ++a) {
    const std::string n = s.attrs[a].name;
    Bad t{"bad:attr_type_" + n, "attribute " + n + " of the other type", valid};
    dlfuse_attr_t& at = t.args.attrs[size_t(a)];
    if (at.type == DLFUSE_ATTR_INT64) {
      at.type = DLFUSE_ATTR_FLOAT64;
      at.value.f64 = 1.0;
    } else {
      at.type = DLFUSE_ATTR_INT64;
      at.value.i64 = 1;
    }
    bad.push_back(std::move(t));
    if (valid.attrs[size_t(a)].type == DLFUSE_ATTR_INT64 && s.attrs[a].max_value < INT64_MAX) {
      Bad r{"bad:attr_range_" + n, "attribute " + n + " one past its range", valid};
      r.args.attrs[size_t(a)].value.i64 = s.attrs[a].max_value + 1;
      bad.push_back(std::move(r));
    }
  }

  std::vector<SchemaRow> rows;
  for (const Bad& b : bad) {
    const SchemaResult r = run_schema_call(reg, dev, op, b.args);
    SchemaRow row;
    row.name = b.name;
    if (!r.ran) {
      row.detail = b.what + ": " + r.message;
    } else if (r.status == DLFUSE_STATUS_OK) {
      row.detail = b.what + ": accepted (status OK); the registry must refuse it";
    } else if (r.status != DLFUSE_STATUS_INVALID_ARGUMENT) {
      row.detail = b.what + ": expected INVALID_ARGUMENT, got " + r.message;
    } else {
      const std::string w = untouched(b.args, r);
      row.pass = w.empty();
      row.detail = b.what + ": " + (w.empty() ? r.message : w);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace dlfuse_conformance
