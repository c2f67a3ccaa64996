// Expression half of the template parser (targets, expressions, filters and tests): a base
// class the statement parser (jinja_parser.cpp) extends. Internal to the template library.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace sluice::jinja {

using EndTags = std::initializer_list<std::string_view>;

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, std::string_view source, int max_depth)
      : toks_(std::move(tokens)), map_(source), max_depth_(max_depth) {}

 protected:
  // ---- token helpers ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  static bool is_op(const Token& t, std::string_view op) {
    return t.type == TokenType::kOperator && t.text == op;
  }
  static bool is_name(const Token& t, std::string_view n) {
    return t.type == TokenType::kName && t.text == n;
  }
  bool at_op(std::string_view op) const { return is_op(cur(), op); }
  bool at_name(std::string_view n) const { return is_name(cur(), n); }

  Error fail(uint32_t pos, const std::string& msg) const {
    return make_error(map_.describe(pos), ": ", msg);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kData:
        return "template data";
      case TokenType::kVarBegin:
        return "begin of print statement";
      case TokenType::kVarEnd:
        return "end of print statement";
      case TokenType::kBlockBegin:
        return "begin of statement block";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kString:
        return "string";
      case TokenType::kInteger:
        return "integer";
      case TokenType::kFloat:
        return "float";
      case TokenType::kEof:
        return "end of template";
      default:
        return "'" + t.text + "'";
    }
  }

  Status expect_op(std::string_view op) {
    if (!at_op(op))
      return fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
    advance();
    return {};
  }
  Status expect_type(TokenType type, const char* what) {
    if (cur().type != type)
      return fail(cur().pos, std::string("expected ") + what + ", got " + describe(cur()));
    advance();
    return {};
  }
  Result<std::string> expect_name() {
    if (cur().type != TokenType::kName)
      return fail(cur().pos, "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }

  // RAII recursion budget.
  struct DepthGuard {
    explicit DepthGuard(ExprParser& p) : p_(p) { ++p_.depth_; }
    ~DepthGuard() { --p_.depth_; }
    bool exceeded() const { return p_.depth_ > p_.max_depth_; }
    ExprParser& p_;
  };
  // Operator, filter and postfix chains are parsed by loops but nest the tree one level per
  // link (evaluation recurses through it), so each link spends the same budget.
  struct ChainGuard {
    explicit ChainGuard(ExprParser& p) : p_(p) {}
    ~ChainGuard() { p_.depth_ -= links_; }
    bool link() {
      ++links_;
      return ++p_.depth_ <= p_.max_depth_;
    }
    ExprParser& p_;
    int links_ = 0;
  };
  Error too_deep() const {
    return fail(cur().pos,
                "template nesting too deep (parser limit " + std::to_string(max_depth_) + ")");
  }

  // ---- assignment targets ----
  bool is_tuple_end(EndTags extra) const;
  Result<Target> parse_target_tuple(EndTags extra);
  Result<Target> parse_target_primary();

  // ---- expressions, following jinja2/parser.py ----
  Result<ExprPtr> parse_expression(bool with_condexpr);
  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  template <class Next>
  Result<ExprPtr> parse_binary_level(
      Next next, std::initializer_list<std::pair<std::string_view, BinaryOp>> ops);
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary_filtered();
  Result<ExprPtr> parse_unary(bool with_filter);
  void note_name(const std::string& name);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, EndTags extra,
                              bool explicit_parens);
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(CallArgsExpr& out);
  Result<ExprPtr> parse_call(ExprPtr callee);
  Result<std::string> parse_dotted_name();
  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  SourceMap map_;
  int max_depth_;
  int depth_ = 0;                        // recursion budget spent (DepthGuard / ChainGuard)
  std::vector<MacroStmt*> macro_stack_;  // macros being parsed (see note_name)
};

}  // namespace sluice::jinja
