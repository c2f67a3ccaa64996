// `sluice tokenize MODEL.gguf (--text TEXT | --file FILE) [--ids|--pieces] [--no-bos]
// [--special]`: prints the token ids of a text as the model's tokenizer produces them.
//   default   one line per token: id and piece (escaped, control tokens shown)
//   --ids     the ids on one line, space separated
//   --pieces  one piece per line (escaped)
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "base/unicode.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool have_text = false;
  bool have_file = false;
  bool ids = false;
  bool pieces = false;
  bool no_bos = false;
  bool special = false;
};

// A piece made printable: C escapes for control characters and quotes, \xNN for bytes that
// are not valid UTF-8 (a byte-fallback token holds part of a character).
std::string escape_piece(std::string_view p) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c >= 0x80) {
      const unicode::DecodedCp d = unicode::decode_utf8(p, i);
      if (d.valid) {
        out.append(p.substr(i, d.len));
        i += d.len;
        continue;
      }
    }
    char buf[8];
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\'':
        out += "\\'";
        break;
      default:
        if (c < 0x20 || c >= 0x7F) {
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out.push_back(char(c));
        }
    }
    ++i;
  }
  return out;
}

int run_tokenize(const TokenizeArgs& a) {
  if (a.have_text == a.have_file) {
    return report_error("tokenize", "give exactly one of --text TEXT or --file FILE");
  }
  std::string text = a.text;
  if (a.have_file) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) return report_error("tokenize", "cannot read '" + a.file + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  Result<Tokenizer> tok = Tokenizer::load(a.model);
  if (!tok.ok()) return report_error("tokenize", tok.message());

  EncodeOptions opts;
  opts.parse_special = a.special;
  if (a.no_bos) opts.add_bos = false;
  Result<std::vector<TokenId>> ids = tok->encode(text, opts);
  if (!ids.ok()) return report_error("tokenize", ids.message());

  std::string out;
  if (a.ids) {
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string((*ids)[i]);
    }
    out.push_back('\n');
  } else {
    for (TokenId id : *ids) {
      const std::string piece = "'" + escape_piece(tok->piece(id, /*render_special=*/true)) + "'";
      if (a.pieces) {
        out += piece + "\n";
      } else {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "%7d ", id);
        out += buf + piece + "\n";
      }
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  auto args = std::make_shared<TokenizeArgs>();
  cmd->add_option("model", args->model, "GGUF model (or vocab-only) file")->required();
  CLI::Option* text = cmd->add_option("--text", args->text, "Text to tokenize");
  CLI::Option* file = cmd->add_option("--file", args->file, "File whose contents to tokenize");
  text->excludes(file);
  CLI::Option* ids = cmd->add_flag("--ids", args->ids, "Print only the ids, on one line");
  CLI::Option* pieces = cmd->add_flag("--pieces", args->pieces, "Print only the pieces");
  ids->excludes(pieces);
  cmd->add_flag("--no-bos", args->no_bos, "Do not add the BOS token");
  cmd->add_flag("--special", args->special,
                "Parse control-token text (<|eot_id|>) into the control tokens");
  cmd->callback([args, text, file, &exit_code] {
    args->have_text = text->count() > 0;
    args->have_file = file->count() > 0;
    exit_code = run_tokenize(*args);
  });
}

}  // namespace sluice::cli
