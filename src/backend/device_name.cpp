#include "backend/device_name.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hearth {

DeviceName parse_device_name(std::string_view device) {
  if (device == "cpu") return {DeviceName::Kind::Cpu, 0};
  if (device == "auto") return {DeviceName::Kind::Auto, 0};
  if (device == "cuda") return {DeviceName::Kind::Cuda, 0};
  if (device.starts_with("cuda:")) {
    const std::string_view index = device.substr(5);
    if (index.empty() || index.size() > 3 ||
        !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail("device '{}': expected cuda:N with N a device index", device);
    return {DeviceName::Kind::Cuda, std::stoi(std::string(index))};
  }
  fail("unknown device '{}' (expected cpu, cuda, cuda:N or auto)", device);
}

}  // namespace hearth
