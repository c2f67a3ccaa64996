// An error answered to an HTTP client, in OpenAI's shape:
//
//   HTTP 400
//   {"error": {"message": "'temperature' must be in [0, 2] (got 3)",
//              "type": "invalid_request_error", "param": "temperature", "code": null}}
//
// Every failure the server and the router report goes through ApiError, so the status code, the
// type and the body stay consistent across endpoints (docs/server.md lists them).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sluice::http {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;      // "" -> null
  std::string code;       // "" -> null
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (429, 503)

  nlohmann::ordered_json to_json() const;
  // Anthropic's shape, for the Messages API: {"type": "error", "error": {"type", "message"}},
  // the type from the status (invalid_request_error 400, authentication_error 401,
  // permission_error 403, not_found_error 404, request_too_large 413, rate_limit_error 429,
  // overloaded_error 503/529, api_error other 5xx).
  nlohmann::ordered_json to_anthropic_json() const;
};

// 400 invalid_request_error naming the offending field.
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
// 500 server_error.
ApiError internal_error(std::string message);
// Any status, type and code (no param).
ApiError status_error(int status, std::string message, std::string type, std::string code = "");

// Serializes JSON for the wire: compact, invalid UTF-8 replaced by U+FFFD instead of throwing
// (token pieces of byte-level vocabularies can be partial characters).
std::string to_wire(const nlohmann::ordered_json& j);

}  // namespace sluice::http
