#include "http/api_error.h"

namespace sluice::http {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
  nlohmann::ordered_json j;
  j["error"] = std::move(e);
  return j;
}

nlohmann::ordered_json ApiError::to_anthropic_json() const {
  const char* t = "invalid_request_error";
  switch (status) {
    case 401:
      t = "authentication_error";
      break;
    case 403:
      t = "permission_error";
      break;
    case 404:
      t = "not_found_error";
      break;
    case 413:
      t = "request_too_large";
      break;
    case 429:
      t = "rate_limit_error";
      break;
    case 503:
    case 529:
      t = "overloaded_error";
      break;
    default:
      if (status >= 500) t = "api_error";
  }
  nlohmann::ordered_json j;
  j["type"] = "error";
  j["error"] = {{"type", t}, {"message", message}};
  return j;
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError status_error(int status, std::string message, std::string type, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

ApiError internal_error(std::string message) {
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = std::move(message);
  return e;
}

std::string to_wire(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace sluice::http
