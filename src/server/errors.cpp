#include "server/errors.h"

namespace hearth::server {

std::string openai_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

nlohmann::json error_body(ApiStyle style, int status, const std::string& message,
                          const std::string& param, const std::string& code) {
  if (style == ApiStyle::Ollama) return {{"error", message}};
  if (style == ApiStyle::Anthropic)
    return {{"type", "error"},
            {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
  nlohmann::json e = {{"message", message},
                      {"type", openai_error_type(status)},
                      {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return {{"error", e}};
}

}  // namespace hearth::server
