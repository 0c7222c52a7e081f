// Errors: every failure a user can cause (bad file, bad flag, bad request) becomes a hearth::Error
// whose message names the file, tensor, field or parameter at fault. Hot paths do not throw.
#pragma once
#include <fmt/format.h>

#include <string>

#include "hearth/error.h"

namespace hearth {

// A device ran out of memory: what was asked may fit once other work gives memory back (the
// engine preempts requests rather than failing them).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Throws hearth::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace hearth
