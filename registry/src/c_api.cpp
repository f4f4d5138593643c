// Version, errors, and the generic op interface of the C API.
#include "error.hpp"
#include "registry.hpp"

using namespace dlfuse;

extern "C" {

DLFUSE_EXPORT void dlfuse_abi_version(uint32_t* major, uint32_t* minor) {
  if (major) *major = DLFUSE_ABI_MAJOR;
  if (minor) *minor = DLFUSE_ABI_MINOR;
}

DLFUSE_EXPORT const char* dlfuse_last_error(void) { return last_error(); }

DLFUSE_EXPORT const char* dlfuse_status_string(dlfuse_status_t status) { return status_name(status); }

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_get(dlfuse_registry_t registry, const char* op_name, dlfuse_op_t* op) {
  return guarded("dlfuse_op_get", [&] {
    if (!registry)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_op_get: argument 'registry' is NULL; expected a registry");
    if (!op_name || !*op_name)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_op_get: argument 'op_name' is %s; expected an op name",
                  op_name ? "empty" : "NULL");
    if (!op)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_get: argument 'op' is NULL; expected a pointer to receive the handle");
    *op = nullptr;
    std::lock_guard<std::mutex> lock(registry->mutex);
    if (!offered_locked(registry, op_name))
      return fail(DLFUSE_STATUS_NOT_FOUND, "dlfuse_op_get: no available plugin offers op '%s'", op_name);
    *op = op_handle_locked(registry, op_name);
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_call(dlfuse_op_t op, const DLTensor* const* inputs, int32_t num_inputs,
                                             DLTensor* const* outputs, int32_t num_outputs, const dlfuse_attr_t* attrs,
                                             int32_t num_attrs, void* stream) {
  return guarded("dlfuse_op_call", [&] {
    if (!op)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_op_call: argument 'op' is NULL; expected a handle from dlfuse_op_get");
    return call_op(op, inputs, num_inputs, outputs, num_outputs, attrs, num_attrs, stream);
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_op_resolve(dlfuse_op_t op, int32_t device_type, DLDataType dtype,
                                                int32_t* plugin) {
  return guarded("dlfuse_op_resolve", [&] {
    if (!op || !plugin)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_op_resolve: argument '%s' is NULL", op ? "plugin" : "op");
    return resolve_op(op, device_type, dtype, plugin);
  });
}

}  // extern "C"
