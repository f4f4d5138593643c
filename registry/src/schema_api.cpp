// The C API of op schemas (ABI 1.2): listing them, reading one, inferring a call's outputs.
#include <cstring>

#include "error.hpp"
#include "registry.hpp"

using namespace dlfuse;

namespace {

constexpr size_t kSchemaSize = offsetof(dlfuse_op_schema_t, plugin) + sizeof(int32_t);

dlfuse_status_t fill_schema(const dlfuse_op_schema_t& from, dlfuse_op_schema_t* to, const char* fn) {
  if (!to)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument 'schema' is NULL; expected a dlfuse_op_schema_t with "
                "struct_size >= %zu",
                fn, kSchemaSize);
  if (to->struct_size < kSchemaSize)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'schema': struct_size is %zu; expected >= %zu", fn,
                static_cast<size_t>(to->struct_size), kSchemaSize);
  const size_t size = to->struct_size;
  dlfuse_op_schema_t full = from;
  full.struct_size = size;
  std::memcpy(to, &full, size < sizeof full ? size : sizeof full);  // a newer caller's tail is left as it was
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t no_schema(dlfuse_op_t op, const char* fn) {
  return fail(DLFUSE_STATUS_NOT_FOUND,
              "%s: op '%s' has no schema (a plugin offers it without declaring one); "
              "expected a core op or a declared one",
              fn, op->name.c_str());
}

}  // namespace

extern "C" {

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_op_count(dlfuse_registry_t registry, int32_t* count) {
  return guarded("dlfuse_registry_op_count", [&] {
    if (!registry)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_registry_op_count: argument 'registry' is NULL; expected a registry");
    if (!count) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_registry_op_count: argument 'count' is NULL");
    std::lock_guard<std::mutex> lock(registry->mutex);
    *count = DLFUSE_NUM_CORE_OPS + static_cast<int32_t>(registry->declared.size());
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_op_schema(dlfuse_registry_t registry, int32_t index,
                                                        dlfuse_op_schema_t* schema) {
  return guarded("dlfuse_registry_op_schema", [&] {
    if (!registry)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_registry_op_schema: argument 'registry' is NULL; expected a registry");
    std::lock_guard<std::mutex> lock(registry->mutex);
    const int32_t n = DLFUSE_NUM_CORE_OPS + static_cast<int32_t>(registry->declared.size());
    if (index < 0 || index >= n)
      return fail(DLFUSE_STATUS_NOT_FOUND, "dlfuse_registry_op_schema: argument 'index' is %d; expected 0..%d", index,
                  n - 1);
    const dlfuse_op_schema_t& s = index < DLFUSE_NUM_CORE_OPS
                                      ? op_schema(core_op(index))
                                      : registry->declared[size_t(index - DLFUSE_NUM_CORE_OPS)]->schema;
    return fill_schema(s, schema, "dlfuse_registry_op_schema");
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_schema(dlfuse_op_t op, dlfuse_op_schema_t* schema) {
  return guarded("dlfuse_op_schema", [&] {
    if (!op)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_schema: argument 'op' is NULL; expected a handle from dlfuse_op_get");
    const OpSpec* spec = spec_of(op);
    if (!spec) return no_schema(op, "dlfuse_op_schema");
    return fill_schema(op_schema(spec), schema, "dlfuse_op_schema");
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_infer_outputs(dlfuse_op_t op, const DLTensor* const* inputs, int32_t num_inputs,
                                                      const dlfuse_attr_t* attrs, int32_t num_attrs,
                                                      int32_t num_outputs, int32_t* ndims, int64_t* shapes,
                                                      DLDataType* dtypes) {
  return guarded("dlfuse_op_infer_outputs", [&] {
    if (!op)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_infer_outputs: argument 'op' is NULL; expected a handle from dlfuse_op_get");
    const OpSpec* spec = spec_of(op);
    if (!spec) return no_schema(op, "dlfuse_op_infer_outputs");
    const dlfuse_op_schema_t& s = op_schema(spec);
    if (num_outputs != s.num_outputs)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_op_infer_outputs: %s: num_outputs is %d; expected %d", s.name,
                  num_outputs, s.num_outputs);
    if (!ndims || !shapes || !dtypes)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_infer_outputs: %s: argument '%s' is NULL; expected an "
                  "array for %d outputs",
                  s.name,
                  !ndims    ? "ndims"
                  : !shapes ? "shapes"
                            : "dtypes",
                  num_outputs);
    return infer_outputs(*spec, inputs, num_inputs, attrs, num_attrs, ndims, shapes, dtypes);
  });
}

}  // extern "C"
