// The unit tests' main: the environment of the caller must not leak into the tests.
#include <cstdlib>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  // A developer's own settings would change discovery and dispatch order.
  ::unsetenv("DLFUSE_PLUGIN_PATH");
  ::unsetenv("DLFUSE_PREFER");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
