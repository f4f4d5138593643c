// Shared glue of the test plugin: errors, the exception wall, argument sanity, dtype dispatch.
#ifndef DLFUSE_TESTREF_TESTREF_H_
#define DLFUSE_TESTREF_TESTREF_H_

#include <dlfuse/plugin_kit.hpp>

#include <string>

#include "scalar.h"

#ifndef DLFUSE_TESTREF_INJECT_BUG
#define DLFUSE_TESTREF_INJECT_BUG 0
#endif

namespace testref {

// The plugin's name (name.cpp): only that file reads DLFUSE_TESTREF_NAME, so the many
// builds of these sources (CMakeLists.txt) share their other objects in ccache wherever a
// build's switch does not touch a file.
extern const char* const kName;

inline dlfuse_status_t fail(char* err, size_t err_size, dlfuse_status_t status, const std::string& msg) {
  return dlfuse::kit::write_error(kName, err, err_size, status, msg);
}

// Nothing may cross the C boundary: every entry point runs its body through the kit's wall.
template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return dlfuse::kit::guarded(kName, err, err_size, std::forward<F>(body));
}

template <class T>
struct Tag {
  using type = T;
};

// Runs body(Tag<storage>, Tag<accumulator>) for a dtype the plugin declares.
template <class F>
dlfuse_status_t with_dtype(DLDataType dt, char* err, size_t err_size, F&& body) {
  if (dt.lanes == 1) {
    if (dt.code == kDLFloat && dt.bits == 32) return body(Tag<float>{}, Tag<float>{});
    if (dt.code == kDLFloat && dt.bits == 64) return body(Tag<double>{}, Tag<double>{});
    if (dt.code == kDLFloat && dt.bits == 16) return body(Tag<Half>{}, Tag<float>{});
    if (dt.code == kDLBfloat && dt.bits == 16) return body(Tag<BFloat16>{}, Tag<float>{});
  }
  return fail(err, err_size, DLFUSE_STATUS_UNSUPPORTED, "dtype not supported");
}

// The registry validates calls fully; this only keeps a call that slipped through
// (a bypassing host, a registry bug) from crashing the process.
// `optional_inputs`: bit i set where input i may be NULL (ABI 1.1's optional inputs).
dlfuse_status_t check_call(const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                           bool first_output_required, uint32_t optional_inputs = 0);
bool read_activation(const dlfuse_kernel_args_t* args, int* act);
double read_multiplier(const dlfuse_kernel_args_t* args);

dlfuse_status_t matmul_add_relu(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_relu_backward(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation_backward(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation_backward(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual_backward(void*, void*, const dlfuse_kernel_args_t* args);

// The testref_ops build's own ops (extra_op.cpp).
extern const dlfuse_op_schema_t kScaleAddSchema, kScaleAddBackwardSchema;
dlfuse_status_t scale_add(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t scale_add_backward(void*, void*, const dlfuse_kernel_args_t* args);
extern const dlfuse_op_schema_t kAxpbySchema, kAxpbyBackwardSchema;
dlfuse_status_t axpby(void*, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t axpby_backward(void*, void*, const dlfuse_kernel_args_t* args);

}  // namespace testref

#endif
