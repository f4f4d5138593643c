# ccache as the compiler launcher, where installed and no launcher was chosen. Within one
# build it serves the many builds of the same sources: the test plugin's mutants and
# deliberately wrong variants (tests/plugins/testref) differ by a -D switch that most of
# their files never read, and ccache's preprocessor mode hashes the preprocessed source, so
# those files compile once. A wheel build starts from an empty build folder; the CUDA
# plugin's device code for every architecture then takes minutes, which a rebuild with the
# same header paths skips (not pip's isolated builds, whose DLPack header lives in a new
# temporary folder each time).
find_program(DLFUSE_CCACHE ccache)
foreach(_lang C CXX CUDA)
  if(DLFUSE_CCACHE AND NOT DEFINED CMAKE_${_lang}_COMPILER_LAUNCHER
     AND NOT DEFINED ENV{CMAKE_${_lang}_COMPILER_LAUNCHER})
    set(CMAKE_${_lang}_COMPILER_LAUNCHER ${DLFUSE_CCACHE} CACHE STRING "")
  endif()
endforeach()
