#include "device_select.h"

#include <dlfuse/plugin_kit.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace dlfuse_plugin {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<size_t> select_devices(const std::vector<Selectable>& all, const std::string& spec, const char* env,
                                   const char* what, const std::string& listing) {
  const std::string prefix = std::string(env) + "='" + spec + "'";
  std::vector<size_t> out;
  std::vector<bool> taken(all.size(), false);
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string sel = spec.substr(pos, comma - pos);
    pos = comma + 1;
    sel.erase(0, sel.find_first_not_of(" \t"));
    sel.erase(sel.find_last_not_of(" \t") + 1);
    if (sel.empty()) continue;
    bool matched = false;
    const bool numeric = std::all_of(sel.begin(), sel.end(), [](char c) { return c >= '0' && c <= '9'; });
    for (size_t i = 0; i < all.size(); ++i) {
      bool hit;
      if (numeric)
        hit = std::strtoul(sel.c_str(), nullptr, 10) == i;
      else if (lower(sel) == "gpu")
        hit = !all[i].is_cpu;
      else if (lower(sel) == "cpu")
        hit = all[i].is_cpu;
      else
        hit = lower(all[i].label).find(lower(sel)) != std::string::npos;
      if (!hit) continue;
      matched = true;
      if (!taken[i]) out.push_back(i);
      taken[i] = true;
    }
    if (!matched)
      throw dlfuse::kit::Error(DLFUSE_STATUS_UNAVAILABLE,
                               prefix + ": selector '" + sel + "' matches no " + what + "; " + what + "s: " + listing);
  }
  if (out.empty())
    throw dlfuse::kit::Error(DLFUSE_STATUS_UNAVAILABLE, prefix + " selects no " + what + "; " + what + "s: " + listing);
  return out;
}

}  // namespace dlfuse_plugin
