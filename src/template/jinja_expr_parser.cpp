#include "template/jinja_expr_parser.h"

namespace sluice::jinja {

bool ExprParser::is_tuple_end(EndTags extra) const {
  const Token& t = cur();
  if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || is_op(t, ")")) return true;
  return t.type == TokenType::kName && std::find(extra.begin(), extra.end(), t.text) != extra.end();
}

Result<Target> ExprParser::parse_target_tuple(EndTags extra) {
  DepthGuard g(*this);
  if (g.exceeded()) return too_deep();
  std::vector<Target> items;
  bool is_tuple = false;
  uint32_t pos = cur().pos;
  while (true) {
    if (!items.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra)) break;
    SLUICE_ASSIGN_OR_RETURN(Target t, parse_target_primary());
    items.push_back(std::move(t));
    if (!at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (items.empty()) return fail(pos, "expected an assignment target, got " + describe(cur()));
    return std::move(items[0]);
  }
  Target t;
  t.kind = Target::Kind::kTuple;
  t.items = std::move(items);
  return t;
}

Result<Target> ExprParser::parse_target_primary() {
  const Token& t = cur();
  if (t.type == TokenType::kName) {
    static constexpr std::string_view kConsts[] = {"true",  "false", "True",
                                                   "False", "none",  "None"};
    for (std::string_view c : kConsts) {
      if (t.text == c) return fail(t.pos, "can't assign to constant '" + t.text + "'");
    }
    Target target;
    target.name = t.text;
    advance();
    return target;
  }
  if (is_op(t, "(")) {
    advance();
    SLUICE_ASSIGN_OR_RETURN(Target inner, parse_target_tuple({}));
    SLUICE_RETURN_IF_ERROR(expect_op(")"));
    return inner;
  }
  return fail(t.pos, "can't assign to " + describe(t));
}

Result<ExprPtr> ExprParser::parse_expression(bool with_condexpr) {
  DepthGuard g(*this);
  if (g.exceeded()) return too_deep();
  return with_condexpr ? parse_condexpr() : parse_or();
}

Result<ExprPtr> ExprParser::parse_condexpr() {
  DepthGuard g(*this);
  if (g.exceeded()) return too_deep();
  SLUICE_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  ChainGuard chain(*this);
  while (at_name("if")) {
    if (!chain.link()) return too_deep();
    uint32_t pos = cur().pos;
    advance();
    auto node = std::make_unique<CondExpr>(pos);
    SLUICE_ASSIGN_OR_RETURN(node->test, parse_or());
    if (at_name("else")) {
      advance();
      SLUICE_ASSIGN_OR_RETURN(node->else_expr, parse_condexpr());
    }
    node->then_expr = std::move(expr1);
    expr1 = std::move(node);
  }
  return expr1;
}

Result<ExprPtr> ExprParser::parse_or() {
  SLUICE_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  ChainGuard chain(*this);
  while (at_name("or")) {
    if (!chain.link()) return too_deep();
    uint32_t pos = cur().pos;
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    left = std::make_unique<BinaryExpr>(pos, BinaryOp::kOr, std::move(left), std::move(right));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_and() {
  SLUICE_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  ChainGuard chain(*this);
  while (at_name("and")) {
    if (!chain.link()) return too_deep();
    uint32_t pos = cur().pos;
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    left = std::make_unique<BinaryExpr>(pos, BinaryOp::kAnd, std::move(left), std::move(right));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_not() {
  if (at_name("not")) {
    DepthGuard g(*this);
    if (g.exceeded()) return too_deep();
    uint32_t pos = cur().pos;
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    return ExprPtr(std::make_unique<UnaryExpr>(pos, UnaryOp::kNot, std::move(operand)));
  }
  return parse_compare();
}

Result<ExprPtr> ExprParser::parse_compare() {
  uint32_t pos = cur().pos;
  SLUICE_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
  std::unique_ptr<CompareExpr> cmp;
  static constexpr std::pair<std::string_view, CompareOp> kOps[] = {
      {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
      {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
  while (true) {
    const CompareOp* found = nullptr;
    for (const auto& [text, op] : kOps) {
      if (at_op(text)) found = &op;
    }
    CompareOp op;
    if (found)
      op = *found;
    else if (at_name("in"))
      op = CompareOp::kIn;
    else if (at_name("not") && is_name(peek(), "in"))
      op = CompareOp::kNotIn;
    else
      break;
    advance();
    if (op == CompareOp::kNotIn) advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, parse_math1());
    if (!cmp) cmp = std::make_unique<CompareExpr>(pos, std::move(expr));
    cmp->rest.emplace_back(op, std::move(right));
  }
  if (cmp) return ExprPtr(std::move(cmp));
  return expr;
}

template <class Next>
Result<ExprPtr> ExprParser::parse_binary_level(
    Next next, std::initializer_list<std::pair<std::string_view, BinaryOp>> ops) {
  SLUICE_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
  ChainGuard chain(*this);
  while (true) {
    const BinaryOp* found = nullptr;
    for (const auto& [text, op] : ops) {
      if (at_op(text)) found = &op;
    }
    if (!found) break;
    if (!chain.link()) return too_deep();
    uint32_t pos = cur().pos;
    BinaryOp op = *found;
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
    left = std::make_unique<BinaryExpr>(pos, op, std::move(left), std::move(right));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_math1() {
  return parse_binary_level(&ExprParser::parse_concat,
                            {{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}});
}

Result<ExprPtr> ExprParser::parse_concat() {
  return parse_binary_level(&ExprParser::parse_math2, {{"~", BinaryOp::kConcat}});
}

Result<ExprPtr> ExprParser::parse_math2() {
  return parse_binary_level(&ExprParser::parse_pow, {{"*", BinaryOp::kMul},
                                                     {"/", BinaryOp::kDiv},
                                                     {"//", BinaryOp::kFloorDiv},
                                                     {"%", BinaryOp::kMod}});
}

Result<ExprPtr> ExprParser::parse_pow() {
  return parse_binary_level(&ExprParser::parse_unary_filtered, {{"**", BinaryOp::kPow}});
}

Result<ExprPtr> ExprParser::parse_unary_filtered() {
  return parse_unary(true);
}

Result<ExprPtr> ExprParser::parse_unary(bool with_filter) {
  DepthGuard g(*this);
  if (g.exceeded()) return too_deep();
  ExprPtr node;
  uint32_t pos = cur().pos;
  if (at_op("-") || at_op("+")) {
    UnaryOp op = at_op("-") ? UnaryOp::kNeg : UnaryOp::kPos;
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    node = std::make_unique<UnaryExpr>(pos, op, std::move(operand));
  } else {
    SLUICE_ASSIGN_OR_RETURN(node, parse_primary());
  }
  SLUICE_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    SLUICE_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

void ExprParser::note_name(const std::string& name) {
  if (name != "caller" && name != "varargs" && name != "kwargs") return;
  for (MacroStmt* m : macro_stack_) {
    if (name == "caller") m->uses_caller = true;
    if (name == "varargs") m->uses_varargs = true;
    if (name == "kwargs") m->uses_kwargs = true;
  }
}

Result<ExprPtr> ExprParser::parse_primary() {
  const Token& t = cur();
  uint32_t pos = t.pos;
  switch (t.type) {
    case TokenType::kName: {
      ExprPtr node;
      if (t.text == "true" || t.text == "True")
        node = std::make_unique<ConstExpr>(pos, Value::boolean(true));
      else if (t.text == "false" || t.text == "False")
        node = std::make_unique<ConstExpr>(pos, Value::boolean(false));
      else if (t.text == "none" || t.text == "None")
        node = std::make_unique<ConstExpr>(pos, Value::none());
      else {
        note_name(t.text);
        node = std::make_unique<NameExpr>(pos, t.text);
      }
      advance();
      return node;
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().text;
        advance();
      }
      return ExprPtr(std::make_unique<ConstExpr>(pos, Value::string(std::move(s))));
    }
    case TokenType::kInteger: {
      int64_t v = t.int_value;
      advance();
      return ExprPtr(std::make_unique<ConstExpr>(pos, Value::integer(v)));
    }
    case TokenType::kFloat: {
      double v = t.float_value;
      advance();
      return ExprPtr(std::make_unique<ConstExpr>(pos, Value::number(v)));
    }
    default:
      break;
  }
  if (is_op(t, "(")) {
    advance();
    SLUICE_ASSIGN_OR_RETURN(ExprPtr node, parse_tuple(false, true, {}, true));
    SLUICE_RETURN_IF_ERROR(expect_op(")"));
    return node;
  }
  if (is_op(t, "[")) return parse_list();
  if (is_op(t, "{")) return parse_dict();
  return fail(pos, "unexpected " + describe(t));
}

// Comma-separated expressions; a single one without a comma is returned as is.
Result<ExprPtr> ExprParser::parse_tuple(bool simplified, bool with_condexpr, EndTags extra,
                                        bool explicit_parens) {
  uint32_t pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra)) break;
    ExprPtr e;
    if (simplified) {
      SLUICE_ASSIGN_OR_RETURN(e, parse_primary());
    } else {
      SLUICE_ASSIGN_OR_RETURN(e, parse_expression(with_condexpr));
    }
    items.push_back(std::move(e));
    if (!at_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return fail(cur().pos, "expected an expression, got " + describe(cur()));
  }
  auto node = std::make_unique<ListExpr>(ExprKind::kTuple, pos);
  node->items = std::move(items);
  return ExprPtr(std::move(node));
}

Result<ExprPtr> ExprParser::parse_list() {
  auto node = std::make_unique<ListExpr>(ExprKind::kList, cur().pos);
  advance();
  while (!at_op("]")) {
    if (!node->items.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
    if (at_op("]")) break;
    SLUICE_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(true));
    node->items.push_back(std::move(e));
  }
  SLUICE_RETURN_IF_ERROR(expect_op("]"));
  return ExprPtr(std::move(node));
}

Result<ExprPtr> ExprParser::parse_dict() {
  auto node = std::make_unique<DictExpr>(cur().pos);
  advance();
  while (!at_op("}")) {
    if (!node->items.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
    if (at_op("}")) break;
    SLUICE_ASSIGN_OR_RETURN(ExprPtr k, parse_expression(true));
    SLUICE_RETURN_IF_ERROR(expect_op(":"));
    SLUICE_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
    node->items.emplace_back(std::move(k), std::move(v));
  }
  SLUICE_RETURN_IF_ERROR(expect_op("}"));
  return ExprPtr(std::move(node));
}

Result<ExprPtr> ExprParser::parse_postfix(ExprPtr node) {
  ChainGuard chain(*this);
  while (true) {
    if (!at_op(".") && !at_op("[") && !at_op("(")) return node;
    if (!chain.link()) return too_deep();
    if (at_op("(")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      SLUICE_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    }
  }
}

Result<ExprPtr> ExprParser::parse_filter_expr(ExprPtr node) {
  ChainGuard chain(*this);
  while (true) {
    if (!at_op("|") && !at_name("is") && !at_op("(")) return node;
    if (!chain.link()) return too_deep();
    if (at_op("|")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (at_name("is")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (at_op("(")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> ExprParser::parse_subscript(ExprPtr node) {
  const Token& t = cur();
  uint32_t pos = t.pos;
  advance();
  if (is_op(t, ".")) {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      std::string name = attr.text;
      advance();
      return ExprPtr(std::make_unique<GetAttrExpr>(pos, std::move(node), std::move(name)));
    }
    if (attr.type != TokenType::kInteger) return fail(attr.pos, "expected name or number");
    auto key = std::make_unique<ConstExpr>(attr.pos, Value::integer(attr.int_value));
    advance();
    return ExprPtr(std::make_unique<GetItemExpr>(pos, std::move(node), std::move(key)));
  }
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) SLUICE_RETURN_IF_ERROR(expect_op(","));
    SLUICE_ASSIGN_OR_RETURN(ExprPtr a, parse_subscribed());
    args.push_back(std::move(a));
  }
  SLUICE_RETURN_IF_ERROR(expect_op("]"));
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    auto tuple = std::make_unique<ListExpr>(ExprKind::kTuple, pos);
    tuple->items = std::move(args);
    key = std::move(tuple);
  }
  return ExprPtr(std::make_unique<GetItemExpr>(pos, std::move(node), std::move(key)));
}

Result<ExprPtr> ExprParser::parse_subscribed() {
  uint32_t pos = cur().pos;
  ExprPtr start;
  if (!at_op(":")) {
    SLUICE_ASSIGN_OR_RETURN(start, parse_expression(true));
    if (!at_op(":")) return start;
  }
  advance();  // ':'
  auto slice = std::make_unique<SliceExpr>(pos);
  slice->start = std::move(start);
  if (!at_op(":") && !at_op("]") && !at_op(",")) {
    SLUICE_ASSIGN_OR_RETURN(slice->stop, parse_expression(true));
  }
  if (at_op(":")) {
    advance();
    if (!at_op("]") && !at_op(",")) {
      SLUICE_ASSIGN_OR_RETURN(slice->step, parse_expression(true));
    }
  }
  return ExprPtr(std::move(slice));
}

Status ExprParser::parse_call_args(CallArgsExpr& out) {
  uint32_t pos = cur().pos;
  SLUICE_RETURN_IF_ERROR(expect_op("("));
  bool require_comma = false;
  while (!at_op(")")) {
    if (require_comma) {
      SLUICE_RETURN_IF_ERROR(expect_op(","));
      if (at_op(")")) break;
    }
    if (at_op("*") || at_op("**"))
      return fail(cur().pos, "*args and **kwargs in calls are not supported");
    if (cur().type == TokenType::kName && is_op(peek(), "=")) {
      std::string key = cur().text;
      advance();
      advance();
      SLUICE_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
      out.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (!out.kwargs.empty()) return fail(pos, "invalid syntax for function call expression");
      SLUICE_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
      out.args.push_back(std::move(v));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Result<ExprPtr> ExprParser::parse_call(ExprPtr callee) {
  auto node = std::make_unique<CallExpr>(cur().pos, std::move(callee));
  SLUICE_RETURN_IF_ERROR(parse_call_args(node->args));
  return ExprPtr(std::move(node));
}

Result<std::string> ExprParser::parse_dotted_name() {
  SLUICE_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (at_op(".")) {
    advance();
    SLUICE_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  return name;
}

Result<ExprPtr> ExprParser::parse_filter(ExprPtr node, bool start_inline) {
  ChainGuard chain(*this);
  while (at_op("|") || start_inline) {
    if (!chain.link()) return too_deep();
    if (!start_inline) advance();
    start_inline = false;
    uint32_t pos = cur().pos;
    SLUICE_ASSIGN_OR_RETURN(std::string name, parse_dotted_name());
    auto f = std::make_unique<FilterExpr>(pos, std::move(node), std::move(name));
    if (at_op("(")) SLUICE_RETURN_IF_ERROR(parse_call_args(f->args));
    node = std::move(f);
  }
  return node;
}

Result<ExprPtr> ExprParser::parse_test(ExprPtr node) {
  uint32_t pos = cur().pos;
  advance();  // 'is'
  bool negated = false;
  if (at_name("not")) {
    negated = true;
    advance();
  }
  SLUICE_ASSIGN_OR_RETURN(std::string name, parse_dotted_name());
  auto test = std::make_unique<TestExpr>(pos, std::move(node), std::move(name));
  const Token& t = cur();
  if (at_op("(")) {
    SLUICE_RETURN_IF_ERROR(parse_call_args(test->args));
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || is_op(t, "(") ||
              is_op(t, "[") || is_op(t, "{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) return fail(t.pos, "you cannot chain multiple tests with is");
    SLUICE_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    SLUICE_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    test->args.args.push_back(std::move(arg));
  }
  ExprPtr result = std::move(test);
  if (negated) result = std::make_unique<UnaryExpr>(pos, UnaryOp::kNot, std::move(result));
  return result;
}

}  // namespace sluice::jinja
