// Errors are values: every fallible function returns Status or Result<T> whose message a
// user can act on ("failed to load 'm.gguf': tensor 'x' extends past end of file ...").
// Bad input never aborts the process.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace sluice {

// The error half of a Result: a human-readable message.
struct Error {
  std::string message;
};

// Status: success, or an Error with a message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : msg_(std::move(e.message)), ok_(false) {}  // NOLINT: implicit by design

  static Status ok_status() { return Status(); }
  bool ok() const { return ok_; }
  const std::string& message() const { return msg_; }

 private:
  std::string msg_;
  bool ok_ = true;
};

// Result<T>: a value or an Error. Implicitly built from either.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                       // NOLINT
  Result(Error e) : v_(std::move(e)) {}                           // NOLINT
  Result(Status s) : v_(Error{s.message()}) { assert(!s.ok()); }  // NOLINT: error status only

  bool ok() const { return v_.index() == 0; }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : std::get<1>(v_).message;
  }
  Status status() const { return ok() ? Status() : Status(std::get<1>(v_)); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // The value, or `fallback` on error (for optional, display-only data).
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

inline std::string to_piece(const std::string& s) {
  return s;
}
inline std::string to_piece(std::string_view s) {
  return std::string(s);
}
inline std::string to_piece(const char* s) {
  return s;
}
inline std::string to_piece(char c) {
  return std::string(1, c);
}
template <class T>
requires std::is_arithmetic_v<T> std::string to_piece(T v) {
  return std::to_string(v);
}

// Builds an Error from string pieces: make_error("bad magic in '", path, "'").
template <class... Args>
Error make_error(Args&&... args) {
  std::string s;
  (s.append(to_piece(std::forward<Args>(args))), ...);
  return Error{std::move(s)};
}

}  // namespace sluice

// Propagate an error Status/Result from the current function.
#define SLUICE_CONCAT_INNER(a, b) a##b
#define SLUICE_CONCAT(a, b) SLUICE_CONCAT_INNER(a, b)

#define SLUICE_RETURN_IF_ERROR(expr)                                            \
  do {                                                                          \
    auto sluice_status_ = (expr);                                               \
    if (!sluice_status_.ok()) return ::sluice::Error{sluice_status_.message()}; \
  } while (0)

// SLUICE_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its error.
#define SLUICE_ASSIGN_OR_RETURN(decl, expr)                                    \
  auto SLUICE_CONCAT(sluice_result_, __LINE__) = (expr);                       \
  if (!SLUICE_CONCAT(sluice_result_, __LINE__).ok())                           \
    return ::sluice::Error{SLUICE_CONCAT(sluice_result_, __LINE__).message()}; \
  decl = std::move(SLUICE_CONCAT(sluice_result_, __LINE__)).value()
