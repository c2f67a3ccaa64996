// StringChecker: host names' total length and A-labels (libidn2, IDNA2008).
#include "grammar/string_checks.h"

#include <idn2.h>

#include <cstdlib>

namespace sluice::grammar {

namespace {

constexpr size_t kMaxHostname = kMaxCheckedLength;

void put_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// The 4 hex digits at raw[i..i+4) as a value; -1 when fewer are there or one is not hex.
int32_t hex4(std::string_view raw, size_t i) {
  if (i + 4 > raw.size()) return -1;
  int32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int h = hex_digit_value(raw[i + k]);
    if (h < 0) return -1;
    v = v << 4 | h;
  }
  return v;
}

bool is_a_label(std::string_view label) {
  return label.size() >= 4 && (label[0] == 'x' || label[0] == 'X') &&
         (label[1] == 'n' || label[1] == 'N') && label[2] == '-' && label[3] == '-';
}

}  // namespace

size_t json_unescape_prefix(std::string_view raw, std::string& out) {
  size_t i = 0;
  while (i < raw.size()) {
    if (raw[i] != '\\') {
      out += raw[i++];
      continue;
    }
    if (i + 1 >= raw.size()) return i;
    const char e = raw[i + 1];
    if (e != 'u') {
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      const size_t k = kFrom.find(e);
      out += k == std::string_view::npos ? e : kTo[k];
      i += 2;
      continue;
    }
    if (i + 6 > raw.size()) return i;
    int32_t cp = hex4(raw, i + 2);
    if (cp < 0) {  // not an escape the grammar allows: keep the bytes
      out += raw.substr(i, 6);
      i += 6;
      continue;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half follows
      if (i + 12 > raw.size()) return i;
      const int32_t lo = raw[i + 6] == '\\' && raw[i + 7] == 'u' ? hex4(raw, i + 8) : -1;
      if (lo >= 0xDC00 && lo <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        i += 6;
      }
    }
    i += 6;
    put_utf8(uint32_t(cp), out);
  }
  return i;
}

bool StringChecker::label_ok(std::string_view label) {
  if (!is_a_label(label)) return true;  // LDH syntax: the grammar's
  // DNS labels are case-insensitive. key_ is reused: a hit allocates nothing (this runs per byte
  // of every candidate token inside a host name).
  key_.assign(label);
  for (char& c : key_)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  if (auto it = labels_.find(key_); it != labels_.end()) return it->second;
  if (labels_.size() > 4096) labels_.clear();
  uint8_t* insert = nullptr;
  // Registration (RFC 5891 4): the A-label decodes as Punycode to a valid U-label (IDNA2008
  // code points, leading combining marks, CONTEXTJ / CONTEXTO rules, bidi) that encodes back.
  const int rc = idn2_register_u8(nullptr, reinterpret_cast<const uint8_t*>(key_.c_str()), &insert,
                                  IDN2_NFC_INPUT);
  std::free(insert);
  return labels_[key_] = rc == IDN2_OK;
}

bool StringChecker::prefix_ok(StringCheck c, std::string_view tail, size_t length, bool pending) {
  if (c != StringCheck::kHostname) return true;
  const bool open = pending || tail.empty() || tail.back() == '.' || tail.back() == '-';
  if (length + (open ? 1 : 0) > kMaxHostname) return false;
  size_t start = 0;
  for (size_t dot = tail.find('.'); dot != std::string_view::npos; dot = tail.find('.', start)) {
    if (!label_ok(tail.substr(start, dot - start))) return false;
    start = dot + 1;
  }
  return true;
}

bool StringChecker::complete_ok(StringCheck c, std::string_view tail, size_t length) {
  if (c != StringCheck::kHostname) return true;
  if (length > kMaxHostname) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = tail.find('.', start);
    if (!label_ok(tail.substr(start, dot == std::string_view::npos ? dot : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool hostname_idna_ok(std::string_view host) {
  StringChecker c;
  return c.complete_ok(StringCheck::kHostname, host, host.size());
}

}  // namespace sluice::grammar
