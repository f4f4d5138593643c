/* What every prototype of bench/binding_techniques.py shares: one op of libdlfuse, looked up
 * once, called with four tensors (x, y, bias, out) and ACTIVATION = relu, exactly as each
 * binding technique hands them over. Only the technique differs between the prototypes. */
#ifndef DLFUSE_BENCH_BINDING_COMMON_H_
#define DLFUSE_BENCH_BINDING_COMMON_H_
#include <stdint.h>
#include <string.h>

#include <dlfuse/dlfuse.h>

typedef dlfuse_status_t (*proto_op_get_t)(dlfuse_registry_t, const char*, dlfuse_op_t*);
typedef dlfuse_status_t (*proto_op_call_t)(dlfuse_op_t, const DLTensor* const*, int32_t, DLTensor* const*, int32_t,
                                           const dlfuse_attr_t*, int32_t, void*);
typedef const char* (*proto_last_error_t)(void);

static proto_op_call_t proto_call_fn;
static proto_last_error_t proto_last_error_fn;
static dlfuse_op_t proto_op;

/* init(registry, op name, addresses of dlfuse_op_get, dlfuse_op_call, dlfuse_last_error): 0 or
 * the status of the look-up. */
static int proto_init(uintptr_t reg, const char* op, uintptr_t get, uintptr_t call, uintptr_t last_error) {
  proto_op_get_t g;
  memcpy(&g, &get, sizeof g);
  memcpy(&proto_call_fn, &call, sizeof proto_call_fn);
  memcpy(&proto_last_error_fn, &last_error, sizeof proto_last_error_fn);
  return (int)g((dlfuse_registry_t)reg, op, &proto_op);
}

static int proto_run(const DLTensor* x, const DLTensor* y, const DLTensor* b, DLTensor* out) {
  const DLTensor* in[3] = {x, y, b};
  DLTensor* outs[1] = {out};
  dlfuse_attr_t a;
  a.key = DLFUSE_ATTR_ACTIVATION;
  a.type = DLFUSE_ATTR_INT64;
  a.value.i64 = DLFUSE_ACT_RELU;
  return (int)proto_call_fn(proto_op, in, 3, outs, 1, &a, 1, NULL);
}
#endif
