// The device names the CLI and the library take (--device, LoadOptions::device, hearth quantize
// --device): cpu | cuda | cuda:N | auto, parsed in one place for every user of them.
#pragma once
#include <string_view>

namespace hearth {

struct DeviceName {
  enum class Kind { Cpu, Cuda, Auto };
  Kind kind = Kind::Cpu;
  int index = 0;  // cuda:N's N (0 for plain "cuda")
};

// Throws an error naming the device on anything else (an unknown name, cuda:N without a
// device index).
DeviceName parse_device_name(std::string_view device);

}  // namespace hearth
