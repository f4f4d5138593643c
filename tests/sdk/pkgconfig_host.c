/* An application built with nothing but `pkg-config --cflags --libs dlfuse`: it loads the
 * plugin files named on the command line (no other discovery), runs add_mul_activation
 * on host arrays and checks every element against a double computation.
 * Exit 0 only if the call succeeded and every element matched. */
#include <dlfuse/dlfuse.h>

#include <math.h>
#include <stdio.h>

enum { M = 37, N = 19 };

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN_PATHS\n", argv[0]);
    return 2;
  }
  dlfuse_registry_options_t opts = {sizeof opts, DLFUSE_DISCOVER_NONE, argv[1]};
  dlfuse_registry_t reg = NULL;
  if (dlfuse_registry_create(&opts, &reg) != DLFUSE_STATUS_OK) {
    fprintf(stderr, "registry: %s\n", dlfuse_last_error());
    return 1;
  }
  static float x[M * N], y[M * N], bias[N], out[M * N];
  for (int i = 0; i < M * N; ++i) {
    x[i] = (float)((i * 7919 % 201) - 100) / 37.0f;
    y[i] = (float)((i * 104729 % 173) - 86) / 29.0f;
    out[i] = NAN; /* poison: every element must be written */
  }
  for (int j = 0; j < N; ++j) bias[j] = (float)(j - 9) / 5.0f;
  int64_t shape2[2] = {M, N}, shape1[1] = {N};
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType f32 = {kDLFloat, 32, 1};
  DLTensor tx = {x, cpu, 2, f32, shape2, NULL, 0}, ty = {y, cpu, 2, f32, shape2, NULL, 0};
  DLTensor tb = {bias, cpu, 1, f32, shape1, NULL, 0}, to = {out, cpu, 2, f32, shape2, NULL, 0};
  const double k = -0.75;
  if (dlfuse_add_mul_activation(reg, &tx, &ty, &tb, k, DLFUSE_ACT_TANH, &to, NULL) != DLFUSE_STATUS_OK) {
    fprintf(stderr, "add_mul_activation: %s\n", dlfuse_last_error());
    dlfuse_registry_destroy(reg);
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < M * N; ++i) {
    const double want = tanh((double)x[i] + (double)bias[i % N] + k * (double)y[i]);
    if (!(fabs(out[i] - want) <= 1e-6 + 2e-5 * fabs(want))) ++bad;
  }
  dlfuse_registry_destroy(reg);
  printf("pkg-config host: %d of %d elements wrong\n", bad, M * N);
  return bad ? 1 : 0;
}
