// The plugin's name, the one thing that differs between the builds of these sources besides
// their switches (CMakeLists.txt): alone in this file, so that every other object of a build
// is the same as the correct build's wherever its switch does not touch the file (ccache
// then compiles it once; cmake/DlfuseCcache.cmake).
#include "testref.h"

namespace testref {

const char* const kName = DLFUSE_TESTREF_NAME;

}  // namespace testref
