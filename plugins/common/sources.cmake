# Host logic the OpenCL and WebGPU plugins share (no runtime calls): strided views, the
# device selector, the matmul and add_mul backward plans, the kernel table, mlp by composition. Each plugin
# compiles these into its own library (hidden symbols): nothing is linked between plugins.
set(DLFUSE_GPU_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR}/src)
set(DLFUSE_GPU_COMMON_SOURCES
  ${DLFUSE_GPU_COMMON_DIR}/layout.cpp
  ${DLFUSE_GPU_COMMON_DIR}/device_select.cpp
  ${DLFUSE_GPU_COMMON_DIR}/matmul_plan.cpp
  ${DLFUSE_GPU_COMMON_DIR}/elementwise_plan.cpp
  ${DLFUSE_GPU_COMMON_DIR}/kernel_table.cpp
  ${DLFUSE_GPU_COMMON_DIR}/mlp_composed.cpp)
