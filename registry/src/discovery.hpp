// Where plugins are looked for. Never the current directory.
#pragma once
#include <string>

#include "registry.hpp"

namespace dlfuse {

// <folder of libdlfuse.so>/dlfuse/plugins, or "" if it cannot be told.
std::string install_plugin_dir();

// Loads, in order: options->plugin_paths, $DLFUSE_PLUGIN_PATH, the install folder, as
// the flags say. Failures are recorded on their entries, never returned.
void discover_locked(dlfuse_registry* r, uint32_t flags, const char* plugin_paths);

}  // namespace dlfuse
