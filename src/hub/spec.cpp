// hf:// spec parsing and validation, and the URL / cache path built from a valid spec.
#include <string>
#include <string_view>
#include <vector>

#include "hub/hub.h"

namespace sluice {
namespace {

constexpr std::string_view kScheme = "hf://";
constexpr std::string_view kUsage = "hf://OWNER/REPO/FILE.gguf[@REVISION]";
constexpr size_t kNameMax = 96;       // the hub's limit on owner and repo names
constexpr size_t kRevisionMax = 128;  // branch, tag or 40-hex commit hash

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

bool ends_with_gguf(std::string_view s) {
  if (s.size() < 5) return false;
  std::string tail(s.substr(s.size() - 5));
  for (char& c : tail) c = char(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return tail == ".gguf";
}

std::vector<std::string_view> split_slash(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, slash - start));
    start = slash + 1;
  }
}

// Owner, repo and revision: the hub's name alphabet, and never "." or "..".
Status check_name(std::string_view spec, std::string_view what, std::string_view v, size_t max) {
  if (v == "." || v == "..") {
    return make_error("invalid model spec '", spec, "': ", what, " may not be '", v, "'");
  }
  if (v.size() > max) {
    return make_error("invalid model spec '", spec, "': ", what, " is longer than ", max,
                      " characters");
  }
  for (char c : v) {
    if (!is_name_char(c)) {
      return make_error("invalid model spec '", spec, "': ", what, " '", v,
                        "' may only contain letters, digits, '-', '_' and '.'");
    }
  }
  return {};
}

// Unreserved characters (RFC 3986) pass; everything else becomes %XX.
void append_encoded(std::string& out, std::string_view segment) {
  static const char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : segment) {
    if (is_name_char(char(c)) || c == '~') {
      out.push_back(char(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
}

}  // namespace

bool is_hub_spec(std::string_view spec) {
  return spec.starts_with(kScheme);
}

Result<HubSpec> parse_hub_spec(std::string_view spec) {
  if (!is_hub_spec(spec)) {
    return make_error("invalid model spec '", spec, "': expected ", kUsage);
  }
  std::string_view body = spec.substr(kScheme.size());
  HubSpec out;
  out.revision = "main";
  if (size_t at = body.find('@'); at != std::string_view::npos) {
    std::string_view rev = body.substr(at + 1);
    body = body.substr(0, at);
    if (rev.empty()) {
      return make_error("invalid model spec '", spec, "': empty revision after '@' (expected ",
                        kUsage, ")");
    }
    SLUICE_RETURN_IF_ERROR(check_name(spec, "revision", rev, kRevisionMax));
    out.revision = std::string(rev);
  }

  const std::vector<std::string_view> parts = split_slash(body);
  if (parts.size() < 3 || parts[0].empty() || parts[1].empty() || parts.back().empty()) {
    if (!body.empty() && body.front() == '/') {
      return make_error("invalid model spec '", spec,
                        "': absolute paths are not allowed (expected ", kUsage, ")");
    }
    return make_error("invalid model spec '", spec,
                      "': needs an owner, a repo and a file: ", kUsage);
  }
  SLUICE_RETURN_IF_ERROR(check_name(spec, "owner", parts[0], kNameMax));
  SLUICE_RETURN_IF_ERROR(check_name(spec, "repo", parts[1], kNameMax));

  for (size_t i = 2; i < parts.size(); ++i) {
    std::string_view seg = parts[i];
    if (seg.empty()) {
      return make_error("invalid model spec '", spec, "': empty path segment in the file name",
                        i == 2 ? " (absolute paths are not allowed)" : "");
    }
    if (seg == "." || seg == "..") {
      return make_error("invalid model spec '", spec, "': '", seg,
                        "' path segments are not allowed");
    }
    for (unsigned char c : seg) {
      if (c < 0x20 || c == 0x7f || c == '\\') {
        return make_error("invalid model spec '", spec,
                          "': the file name contains a control character or backslash");
      }
    }
    if (i > 2) out.file.push_back('/');
    out.file.append(seg);
  }
  if (!ends_with_gguf(out.file)) {
    return make_error("invalid model spec '", spec, "': '", out.file,
                      "' is not a .gguf file (expected ", kUsage, ")");
  }
  out.owner = std::string(parts[0]);
  out.repo = std::string(parts[1]);
  return out;
}

std::string hub_file_url(std::string_view endpoint, const HubSpec& spec) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.remove_suffix(1);
  std::string url(endpoint);
  url.push_back('/');
  append_encoded(url, spec.owner);
  url.push_back('/');
  append_encoded(url, spec.repo);
  url.append("/resolve/");
  append_encoded(url, spec.revision);
  for (std::string_view seg : split_slash(spec.file)) {
    url.push_back('/');
    append_encoded(url, seg);
  }
  return url;
}

std::string hub_cache_path(std::string_view cache_dir, const HubSpec& spec) {
  std::string path(cache_dir);
  if (!path.empty() && path.back() != '/') path.push_back('/');
  path.append("hub/").append(spec.owner).append("/").append(spec.repo);
  path.append("/").append(spec.revision).append("/").append(spec.file);
  return path;
}

}  // namespace sluice
