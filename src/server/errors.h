// Request errors and their wire formats. Every handler failure becomes an ApiError (status,
// message naming the field at fault) and is answered in the API's own shape: OpenAI's
// {"error": {"message", "type", "param", "code"}}, Anthropic's
// {"type": "error", "error": {"type", "message"}} or Ollama's {"error": "message"}. Nothing a
// client sends ends the process.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace hearth::server {

enum class ApiStyle { OpenAI, Anthropic, Ollama };

class ApiError : public hearth::Error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : Error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param;
  std::string code;
};

// 400 naming the parameter.
[[noreturn]] inline void bad_request(const std::string& message, const std::string& param = {},
                                     const std::string& code = {}) {
  throw ApiError(400, message, param, code);
}

// OpenAI error "type" for an HTTP status.
std::string openai_error_type(int status);
// Anthropic error "type" for an HTTP status.
std::string anthropic_error_type(int status);

nlohmann::json error_body(ApiStyle style, int status, const std::string& message,
                          const std::string& param = {}, const std::string& code = {});

}  // namespace hearth::server
