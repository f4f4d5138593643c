/* oracle.h: what the fuzz harnesses share with the oracle plugin (oracle_plugin.cpp).
 * The two extra C functions are test hooks reached with dlopen(RTLD_NOLOAD) + dlsym on
 * the file the registry loaded; they are not part of the dlfuse ABI. */
#ifndef DLFUSE_FUZZ_ORACLE_H_
#define DLFUSE_FUZZ_ORACLE_H_

#include <stddef.h>

/* The third-party op the oracle serves: the registry applies only its generic checks. */
#define FUZZ_ORACLE_CUSTOM_OP "fuzz_custom"

/* Tensors whose whole byte extent lies in [base, base + size) get both ends touched. */
typedef void (*fuzz_oracle_set_arena_fn)(const void* base, size_t size);
/* How many kernel calls the oracle has checked. */
typedef unsigned long long (*fuzz_oracle_calls_fn)(void);

#endif /* DLFUSE_FUZZ_ORACLE_H_ */
