// The one exception hearth throws for anything a caller can cause: a bad file, option or request.
// Its message names the file, tensor, field or parameter at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace hearth {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace hearth
