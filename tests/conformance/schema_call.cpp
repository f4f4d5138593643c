#include "schema_call.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "device.h"
#include "stale.h"

namespace dlfuse_conformance {

bool SchemaOp::lookup(dlfuse_registry_t reg, const std::string& name, SchemaOp* op, std::string* err) {
  op->name = name;
  dlfuse_status_t st = dlfuse_op_get(reg, name.c_str(), &op->handle);
  if (st == DLFUSE_STATUS_OK) {
    op->schema = dlfuse_op_schema_t{};
    op->schema.struct_size = sizeof op->schema;
    st = dlfuse_op_schema(op->handle, &op->schema);
  }
  if (st != DLFUSE_STATUS_OK) *err = "op '" + name + "': " + describe_failure(st);
  return st == DLFUSE_STATUS_OK;
}

int SchemaOp::input(const std::string& n) const {
  for (int i = 0; i < schema.num_inputs; ++i)
    if (n == schema.inputs[i].name) return i;
  return -1;
}

int SchemaOp::output(const std::string& n) const {
  for (int i = 0; i < schema.num_outputs; ++i)
    if (n == schema.outputs[i].name) return i;
  return -1;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "," : "") << shape[i];
  s << "]";
  return s.str();
}

namespace {

DLTensor view_of(const HostTensor& t, DLDevice dev, void* data) {
  DLTensor v{};
  v.data = data;
  v.device = dev;
  v.ndim = int32_t(t.shape().size());
  v.dtype = t.dtype();
  v.shape = const_cast<int64_t*>(t.shape().data());
  v.strides = t.null_strides() ? nullptr : const_cast<int64_t*>(t.strides().data());
  v.byte_offset = uint64_t(t.byte_offset());
  return v;
}

}  // namespace

SchemaResult run_schema_call(dlfuse_registry_t reg, DLDevice dev, const SchemaOp& op, const SchemaArgs& args,
                             int stale_run, int timed, std::vector<double>* times) {
  SchemaResult r;
  std::string err;
  const size_t ni = args.in.size(), no = args.out.size();
  std::vector<DeviceBuffer> in_buf(ni), out_buf(no);
  std::vector<DLTensor> in_view(ni), out_view(no);
  std::vector<const DLTensor*> in_ptr(ni, nullptr);
  std::vector<DLTensor*> out_ptr(no, nullptr);
  size_t total = 0;
  auto place = [&](const HostTensor& t, DeviceBuffer* b) {
    total += t.nbytes();
    return b->allocate(reg, dev, t.nbytes(), &err) && b->upload(t.data(), t.nbytes(), &err);
  };
  for (size_t i = 0; i < ni; ++i) {
    if (!args.in[i]) continue;
    if (!place(*args.in[i], &in_buf[i])) return r.message = "setup: " + err, r;
    in_view[i] = view_of(*args.in[i], dev, in_buf[i].ptr());
    in_ptr[i] = &in_view[i];
  }
  for (size_t o = 0; o < no; ++o) {
    const int a = o < args.alias.size() ? args.alias[o] : -1;
    if (a <= -2) {
      const size_t k = size_t(-2 - a);
      if (k >= o || !out_ptr[k]) return r.message = "setup: output aliases an absent output", r;
      out_view[o] = out_view[k];
      out_ptr[o] = &out_view[o];
      continue;
    }
    if (a >= 0) {
      if (size_t(a) >= ni || !args.in[size_t(a)]) return r.message = "setup: output aliases an absent input", r;
      out_view[o] = in_view[size_t(a)];
      out_ptr[o] = &out_view[o];
      continue;
    }
    if (!args.out[o]) continue;
    if (!place(*args.out[o], &out_buf[o])) return r.message = "setup: " + err, r;
    out_view[o] = view_of(*args.out[o], dev, out_buf[o].ptr());
    out_ptr[o] = &out_view[o];
  }
  StaleMemory stale(reg, dev);
  if (stale_run >= 0 && !stale.stir(stale_bytes_for(total), stale_run, &err))
    return r.message = "poisoning stale memory: " + err, r;
  r.status = dlfuse_op_call(op.handle, in_ptr.data(), int32_t(ni), out_ptr.data(), int32_t(no), args.attrs.data(),
                            int32_t(args.attrs.size()), nullptr);
  if (r.status != DLFUSE_STATUS_OK) r.message = describe_failure(r.status);
  stale.release();
  for (int i = 0; times && r.status == DLFUSE_STATUS_OK && i < timed; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r.status = dlfuse_op_call(op.handle, in_ptr.data(), int32_t(ni), out_ptr.data(), int32_t(no), args.attrs.data(),
                              int32_t(args.attrs.size()), nullptr);
    if (r.status == DLFUSE_STATUS_OK) r.status = dlfuse_device_synchronize(reg, dev, nullptr);
    if (r.status != DLFUSE_STATUS_OK) r.message = "timed call: " + describe_failure(r.status);
    times->push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  r.in.resize(ni);
  r.out.resize(no);
  for (size_t i = 0; i < ni; ++i) {
    if (!args.in[i]) continue;
    r.in[i] = *args.in[i];
    if (!in_buf[i].download(r.in[i]->data(), r.in[i]->nbytes(), &err)) return r.message = "readback: " + err, r;
  }
  for (size_t o = 0; o < no; ++o) {
    const int a = o < args.alias.size() ? args.alias[o] : -1;
    if (a >= 0)
      r.out[o] = r.in[size_t(a)];
    else if (a <= -2)
      r.out[o] = r.out[size_t(-2 - a)];
    else if (args.out[o]) {
      r.out[o] = *args.out[o];
      if (!out_buf[o].download(r.out[o]->data(), r.out[o]->nbytes(), &err)) return r.message = "readback: " + err, r;
    }
  }
  r.ran = true;
  return r;
}

bool infer_output_shapes(const SchemaOp& op, DLDataType dt, const std::vector<std::optional<std::vector<int64_t>>>& in,
                         const std::vector<dlfuse_attr_t>& attrs, std::vector<std::vector<int64_t>>* out,
                         std::string* err) {
  std::vector<DLTensor> views(in.size());
  std::vector<const DLTensor*> ptrs(in.size(), nullptr);
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i]) continue;
    views[i] = DLTensor{};
    views[i].device = DLDevice{kDLCPU, 0};
    views[i].ndim = int32_t(in[i]->size());
    views[i].dtype = dt;
    views[i].shape = const_cast<int64_t*>(in[i]->data());
    ptrs[i] = &views[i];
  }
  const int no = op.num_outputs();
  std::vector<int32_t> ndims(size_t(no), 0);
  std::vector<int64_t> shapes(size_t(no) * DLFUSE_MAX_NDIM, 0);
  std::vector<DLDataType> dtypes(static_cast<size_t>(no));
  const dlfuse_status_t st =
      dlfuse_op_infer_outputs(op.handle, ptrs.data(), int32_t(in.size()), attrs.data(), int32_t(attrs.size()), no,
                              ndims.data(), shapes.data(), dtypes.data());
  if (st != DLFUSE_STATUS_OK) {
    *err = describe_failure(st);
    return false;
  }
  out->assign(size_t(no), {});
  for (int o = 0; o < no; ++o)
    (*out)[size_t(o)].assign(shapes.begin() + o * DLFUSE_MAX_NDIM,
                             shapes.begin() + o * DLFUSE_MAX_NDIM + ndims[size_t(o)]);
  return true;
}

}  // namespace dlfuse_conformance
