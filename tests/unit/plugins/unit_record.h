/* unit_record.h: what the unit-test plugins record about the calls they receive.
 *
 * Every plugin built from unit_plugin.cpp exports, besides its entry symbol, two
 * extra C functions that the tests reach with dlopen(RTLD_NOLOAD) + dlsym on the very
 * file the registry loaded (the registry loads with RTLD_LOCAL, so only a handle to
 * that file sees them). They are test hooks, not part of the dlfuse ABI.
 */
#ifndef DLFUSE_UNIT_RECORD_H_
#define DLFUSE_UNIT_RECORD_H_

#include <stddef.h>
#include <stdint.h>

#include "dlfuse/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UNIT_MAX_ATTRS 8
#define UNIT_MAX_TENSORS 6

typedef struct unit_record_t {
  /* lifetime */
  int64_t open_calls;
  int64_t close_calls;
  int64_t get_kernels_calls;
  /* what open() was told */
  size_t host_struct_size;
  uint32_t host_abi_major;
  uint32_t host_abi_minor;
  char host_plugin_path[1024];
  /* kernel calls: a count, and the arguments of the last one */
  int64_t kernel_calls;
  char op[64];
  size_t args_struct_size;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_attrs;
  dlfuse_attr_t attrs[UNIT_MAX_ATTRS];
  void* stream;
  void* input_data[UNIT_MAX_TENSORS];       /* inputs[i]->data (NULL if inputs[i] is NULL) */
  int32_t output_present[UNIT_MAX_TENSORS]; /* outputs[i] != NULL */
  void* output_data[UNIT_MAX_TENSORS];
  int32_t err_buffer_ok; /* args->err != NULL && args->err_size > 0 */
} unit_record_t;

/* Copies the record out (under the plugin's lock). */
typedef void (*unit_plugin_record_fn_t)(unit_record_t* out);
/* Zeroes the kernel-call part of the record (kernel_calls and last-call fields). */
typedef void (*unit_plugin_reset_fn_t)(void);

#define UNIT_RECORD_SYMBOL "unit_plugin_record"
#define UNIT_RESET_SYMBOL "unit_plugin_reset"

/* Behaviours of unit_plugin.cpp, chosen at compile time with -DUNIT_MODE=<n>. */
#define UNIT_MODE_GOOD 0
#define UNIT_MODE_NO_ENTRY 1       /* exports no entry symbol at all */
#define UNIT_MODE_NULL_ENTRY 2     /* dlfuse_plugin_v1() returns NULL */
#define UNIT_MODE_ABI_MAJOR2 3     /* abi_major = 2 */
#define UNIT_MODE_SHORT_STRUCT 4   /* struct_size ends before open() */
#define UNIT_MODE_OPEN_FAILS 5     /* open() fails with a reason */
#define UNIT_MODE_THROWS 6         /* every kernel throws a C++ exception (breaks the rule on purpose) */
#define UNIT_MODE_KERNELS_FAIL 7   /* get_kernels() fails with a message */
#define UNIT_MODE_NULL_KERNELS 8   /* get_kernels() says OK but gives a NULL table of 4 entries */
#define UNIT_MODE_KERNEL_ERROR 9   /* every kernel fails with DEVICE_ERROR and a message */
#define UNIT_MODE_NEWER_MINOR 10   /* abi_minor = DLFUSE_ABI_MINOR + 1, descriptor longer than ours */
#define UNIT_MODE_NULL_REQUIRED 11 /* a required function pointer (get_kernels) is NULL */
#define UNIT_MODE_V2_ENTRY 12      /* exports dlfuse_plugin_v2 instead of dlfuse_plugin_v1 */
#define UNIT_MODE_OPEN_THROWS 13   /* open() throws a C++ exception (breaks the rule on purpose) */
#define UNIT_MODE_NO_DEVICE 14     /* open() succeeds but device_count() gives 0 */
#define UNIT_MODE_NULL_NAME 15     /* the descriptor's name is NULL */
#define UNIT_MODE_DUP_OP 16        /* the kernel table has add_mul_activation on CPU twice */
/* Broken kernel tables: entry 1 of the table has one bad field. */
#define UNIT_MODE_KERNEL_NULL_OP 17        /* op is NULL */
#define UNIT_MODE_KERNEL_NULL_FN 18        /* fn is NULL */
#define UNIT_MODE_KERNEL_NO_DTYPES 19      /* num_dtypes is 0 */
#define UNIT_MODE_KERNEL_CUDA 20           /* device_type is kDLCUDA in a CPU plugin */
#define UNIT_MODE_KERNEL_MIXED_SIZE 21     /* struct_size differs from entry 0's */
#define UNIT_MODE_NEGATIVE_KERNELS 22      /* get_kernels says OK with a count of -1 */
#define UNIT_MODE_KERNEL_UNKNOWN_DEVICE 23 /* plugin and kernels on device type 4242 */
/* Broken descriptors and lifecycles. */
#define UNIT_MODE_DEVICE_COUNT_NEGATIVE 24 /* device_count() says OK with -1 */
#define UNIT_MODE_DEVICE_COUNT_FAILS 25    /* device_count() fails with a message */
#define UNIT_MODE_ENTRY_THROWS 26          /* dlfuse_plugin_v1() throws (breaks the rule on purpose) */
#define UNIT_MODE_BAD_NAME 27              /* the descriptor's name has characters outside [a-z0-9_] */
#define UNIT_MODE_KERNELS_THROW 28         /* get_kernels() throws */
#define UNIT_MODE_NULL_FREE 29             /* a device service (free) is NULL */
/* Kernels that answer badly. */
#define UNIT_MODE_BAD_STATUS 30   /* every kernel returns 4242, not a dlfuse_status_t */
#define UNIT_MODE_SILENT_ERROR 31 /* every kernel fails with DEVICE_ERROR and no message */
#define UNIT_MODE_UNTERMINATED 32 /* every kernel fills err completely, no NUL, and fails */

/* The third-party op every good unit plugin also serves: out = 2 * in, float32, same
 * shape. The registry knows nothing of it, so it gets only the generic checks. */
#define UNIT_OP_SCALE "unit_scale"
#define UNIT_NUM_KERNELS 5

/* The message texts the broken plugins report, so that tests can look for them. */
#define UNIT_OPEN_FAIL_REASON "unit-open-fails: simulated: no such device"
#define UNIT_KERNELS_FAIL_REASON "unit-kernels-fail: simulated: kernel table unavailable"
#define UNIT_KERNEL_ERROR_MESSAGE "unit-kernel-error: simulated failure code 4242"
#define UNIT_THROW_MESSAGE "unit-throws: thrown on purpose"
#define UNIT_OPEN_THROW_MESSAGE "unit-open-throws: thrown from open() on purpose"
#define UNIT_COUNT_FAIL_REASON "unit-count-fails: simulated: driver lost the device"
#define UNIT_ENTRY_THROW_MESSAGE "unit-entry-throws: thrown from the entry on purpose"
#define UNIT_KERNELS_THROW_MESSAGE "unit-kernels-throw: thrown from get_kernels() on purpose"
#define UNIT_BAD_STATUS 4242

/* A plugin whose open() must never run sets this env var to "1" if it does run. */
#define UNIT_OPENED_ENV_PREFIX "DLFUSE_UNIT_OPENED_"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLFUSE_UNIT_RECORD_H_ */
