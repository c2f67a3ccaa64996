#include "template/jinja_parser.h"

#include "template/jinja_expr_parser.h"

namespace sluice::jinja {
namespace {

// Statements (tags and their bodies) on top of the expression parser.
class Parser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Result<Body> parse_root() { return subparse({}); }

 private:
  // ---- statements ----

  Result<Body> subparse(EndTags end_tags) {
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        body.push_back(std::make_unique<TextStmt>(t.pos, t.text));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        advance();
        auto print = std::make_unique<PrintStmt>(t.pos);
        SLUICE_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, false));
        print->exprs.push_back(std::move(e));
        SLUICE_RETURN_IF_ERROR(expect_type(TokenType::kVarEnd, "end of print statement"));
        body.push_back(std::move(print));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (cur().type == TokenType::kName &&
            std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) {
          return body;
        }
        SLUICE_ASSIGN_OR_RETURN(StmtPtr s, parse_statement(end_tags));
        SLUICE_RETURN_IF_ERROR(expect_type(TokenType::kBlockEnd, "end of statement block"));
        if (s) body.push_back(std::move(s));
      } else {
        return fail(t.pos, "unexpected " + describe(t));
      }
    }
    if (end_tags.size() != 0)
      return fail(cur().pos, "unexpected end of template, expected " + tag_list(end_tags));
    return body;
  }

  static std::string tag_list(EndTags tags) {
    std::string s;
    for (std::string_view t : tags) {
      if (!s.empty()) s += " or ";
      s += "'" + std::string(t) + "'";
    }
    return s;
  }

  // After a tag header: "%}", the body, and (drop_needle) the end tag's name.
  Result<Body> parse_statements(EndTags end_tags, bool drop_needle) {
    DepthGuard g(*this);
    if (g.exceeded()) return too_deep();
    if (at_op(":")) advance();
    SLUICE_RETURN_IF_ERROR(expect_type(TokenType::kBlockEnd, "end of statement block"));
    SLUICE_ASSIGN_OR_RETURN(Body body, subparse(end_tags));
    if (drop_needle) advance();
    return body;
  }

  Result<StmtPtr> parse_statement(EndTags enclosing) {
    const Token& t = cur();
    if (t.type != TokenType::kName) return fail(t.pos, "tag name expected");
    const std::string& tag = t.text;
    uint32_t pos = t.pos;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with" || tag == "generation") return parse_with();
    if (tag == "print") {
      advance();
      auto print = std::make_unique<PrintStmt>(pos);
      while (cur().type != TokenType::kBlockEnd) {
        if (!print->exprs.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
        SLUICE_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
        print->exprs.push_back(std::move(e));
      }
      return StmtPtr(std::move(print));
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(pos, "'" + tag + "' outside of a loop");
      advance();
      return StmtPtr(std::make_unique<LoopControlStmt>(
          tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos));
    }
    static constexpr std::string_view kUnsupported[] = {"block", "extends",    "include", "import",
                                                        "from",  "autoescape", "do"};
    for (std::string_view u : kUnsupported) {
      if (tag == u) return fail(pos, "'" + tag + "' tags are not supported in chat templates");
    }
    std::string msg = "unknown tag '" + tag + "'";
    if (enclosing.size() != 0) msg += ", expected " + tag_list(enclosing);
    return fail(pos, msg);
  }

  Result<StmtPtr> parse_if() {
    auto node = std::make_unique<IfStmt>(cur().pos);
    advance();
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(ExprPtr test, parse_tuple(false, false, {}, false));
      SLUICE_ASSIGN_OR_RETURN(Body body, parse_statements({"elif", "else", "endif"}, false));
      node->branches.emplace_back(std::move(test), std::move(body));
      std::string which = cur().text;
      advance();
      if (which == "elif") continue;
      if (which == "else") {
        SLUICE_ASSIGN_OR_RETURN(node->else_body, parse_statements({"endif"}, true));
      }
      break;
    }
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_for() {
    auto node = std::make_unique<ForStmt>(cur().pos);
    advance();
    SLUICE_ASSIGN_OR_RETURN(node->target, parse_target_tuple({"in"}));
    if (!at_name("in")) return fail(cur().pos, "expected 'in', got " + describe(cur()));
    advance();
    SLUICE_ASSIGN_OR_RETURN(node->iter, parse_tuple(false, false, {"recursive"}, false));
    if (at_name("if")) {
      advance();
      SLUICE_ASSIGN_OR_RETURN(node->filter, parse_expression(true));
    }
    if (at_name("recursive")) {
      node->recursive = true;
      advance();
    }
    ++loop_depth_;
    auto body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (!body.ok()) return body.status();
    node->body = std::move(body).value();
    bool has_else = at_name("else");
    advance();
    if (has_else) {
      SLUICE_ASSIGN_OR_RETURN(node->else_body, parse_statements({"endfor"}, true));
    }
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_set() {
    uint32_t pos = cur().pos;
    advance();
    Target target;
    if (cur().type == TokenType::kName && is_op(peek(), ".")) {
      target.kind = Target::Kind::kNamespaceAttr;
      target.name = cur().text;
      advance();
      advance();
      SLUICE_ASSIGN_OR_RETURN(target.attr, expect_name());
    } else {
      SLUICE_ASSIGN_OR_RETURN(target, parse_target_tuple({}));
    }
    if (at_op("=")) {
      advance();
      auto node = std::make_unique<SetStmt>(pos);
      node->target = std::move(target);
      SLUICE_ASSIGN_OR_RETURN(node->value, parse_tuple(false, true, {}, false));
      return StmtPtr(std::move(node));
    }
    auto node = std::make_unique<SetBlockStmt>(pos);
    node->target = std::move(target);
    if (at_op("|")) {
      SLUICE_ASSIGN_OR_RETURN(node->filter, parse_filter(nullptr, false));
    }
    SLUICE_ASSIGN_OR_RETURN(node->body, parse_statements({"endset"}, true));
    return StmtPtr(std::move(node));
  }

  Status parse_signature(MacroStmt& m) {
    SLUICE_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      if (!m.params.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
      SLUICE_ASSIGN_OR_RETURN(std::string name, expect_name());
      if (at_op("=")) {
        advance();
        SLUICE_ASSIGN_OR_RETURN(ExprPtr d, parse_expression(true));
        m.defaults.push_back(std::move(d));
      } else if (!m.defaults.empty()) {
        return fail(cur().pos, "non-default argument follows default argument");
      }
      m.params.push_back(std::move(name));
    }
    SLUICE_RETURN_IF_ERROR(expect_op(")"));
    size_t first_default = m.params.size() - m.defaults.size();
    for (size_t i = 0; i < first_default; ++i) {
      if (m.params[i] == "caller") {
        return fail(
            m.pos,
            "When defining macros or call blocks the special \"caller\" argument must be omitted "
            "or be given a default.");
      }
    }
    return {};
  }

  // Parses a macro-like body with the loop depth reset (break cannot cross a macro).
  Result<Body> parse_macro_body(MacroStmt& m, std::string_view end_tag) {
    macro_stack_.push_back(&m);
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    auto body = end_tag == "endmacro" ? parse_statements({"endmacro"}, true)
                                      : parse_statements({"endcall"}, true);
    loop_depth_ = saved_loop_depth;
    macro_stack_.pop_back();
    return body;
  }

  Result<StmtPtr> parse_macro() {
    auto node = std::make_unique<MacroStmt>(cur().pos);
    advance();
    SLUICE_ASSIGN_OR_RETURN(node->name, expect_name());
    SLUICE_RETURN_IF_ERROR(parse_signature(*node));
    SLUICE_ASSIGN_OR_RETURN(node->body, parse_macro_body(*node, "endmacro"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_call_block() {
    auto node = std::make_unique<CallBlockStmt>(cur().pos);
    advance();
    node->caller.pos = node->pos;
    node->caller.name = "caller";
    if (at_op("(")) SLUICE_RETURN_IF_ERROR(parse_signature(node->caller));
    uint32_t call_pos = cur().pos;
    SLUICE_ASSIGN_OR_RETURN(node->call, parse_expression(true));
    if (node->call->kind != ExprKind::kCall) return fail(call_pos, "expected call");
    SLUICE_ASSIGN_OR_RETURN(node->caller.body, parse_macro_body(node->caller, "endcall"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_filter_block() {
    auto node = std::make_unique<FilterBlockStmt>(cur().pos);
    advance();
    SLUICE_ASSIGN_OR_RETURN(node->filter, parse_filter(nullptr, true));
    SLUICE_ASSIGN_OR_RETURN(node->body, parse_statements({"endfilter"}, true));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_with() {
    auto node = std::make_unique<WithStmt>(cur().pos);
    bool generation = at_name("generation");
    advance();
    if (generation) {
      SLUICE_ASSIGN_OR_RETURN(node->body, parse_statements({"endgeneration"}, true));
      return StmtPtr(std::move(node));
    }
    while (cur().type != TokenType::kBlockEnd) {
      if (!node->assignments.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
      SLUICE_ASSIGN_OR_RETURN(Target t, parse_target_tuple({}));
      SLUICE_RETURN_IF_ERROR(expect_op("="));
      SLUICE_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
      node->assignments.emplace_back(std::move(t), std::move(v));
    }
    SLUICE_ASSIGN_OR_RETURN(node->body, parse_statements({"endwith"}, true));
    return StmtPtr(std::move(node));
  }

  int loop_depth_ = 0;  // enclosing for-loops (break/continue), reset inside macros
};

}  // namespace

Result<std::unique_ptr<Program>> parse_template(std::string_view source, int max_depth) {
  auto program = std::make_unique<Program>();
  program->source = normalize_template_source(source);
  SLUICE_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(program->source));
  Parser parser(std::move(tokens), program->source, max_depth);
  SLUICE_ASSIGN_OR_RETURN(program->body, parser.parse_root());
  return program;
}

}  // namespace sluice::jinja
