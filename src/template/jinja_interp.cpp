#include "template/jinja_interp.h"

#include <algorithm>

#include "template/jinja_builtins.h"
#include "template/jinja_lexer.h"
#include "template/jinja_string.h"

namespace sluice::jinja {

// ---- small types ----

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

Status bind_args(std::string_view fn, const CallArgs& a,
                 std::initializer_list<std::string_view> names, std::vector<const Value*>& out) {
  out.assign(names.size(), nullptr);
  if (a.args.size() > names.size()) {
    return make_error(fn, "() takes at most ", names.size(), " argument(s) (", a.args.size(),
                      " given)");
  }
  for (size_t i = 0; i < a.args.size(); ++i) out[i] = &a.args[i];
  for (const auto& [k, v] : a.kwargs) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) return make_error(fn, "() got an unexpected keyword argument '", k, "'");
    size_t i = static_cast<size_t>(it - names.begin());
    if (out[i]) return make_error(fn, "() got multiple values for argument '", k, "'");
    out[i] = &v;
  }
  return {};
}

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& [k, old] : vars_) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(v));
}

std::string MacroObject::repr() const {
  std::string out = "<Macro ";
  append_py_repr(out, node_->name);
  return out + ">";
}

std::string BoundMethodObject::repr() const {
  return "<built-in method " + name_ + " of " + object_type_repr(self_) + ">";
}

std::string LoopObject::repr() const {
  return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items_->items.size()) +
         ">";
}

bool LoopObject::attr(std::string_view name, Value* out) const {
  const auto& items = items_->items;
  int64_t n = static_cast<int64_t>(items.size());
  int64_t i = static_cast<int64_t>(index0);
  if (name == "index")
    *out = Value::integer(i + 1);
  else if (name == "index0")
    *out = Value::integer(i);
  else if (name == "revindex")
    *out = Value::integer(n - i);
  else if (name == "revindex0")
    *out = Value::integer(n - i - 1);
  else if (name == "first")
    *out = Value::boolean(i == 0);
  else if (name == "last")
    *out = Value::boolean(i == n - 1);
  else if (name == "length")
    *out = Value::integer(n);
  else if (name == "depth")
    *out = Value::integer(depth0_ + 1);
  else if (name == "depth0")
    *out = Value::integer(depth0_);
  else if (name == "previtem")
    *out = i > 0 ? items[index0 - 1] : Value::undefined("there is no previous item");
  else if (name == "nextitem")
    *out = i + 1 < n ? items[index0 + 1] : Value::undefined("there is no next item");
  else
    return false;
  return true;
}

// ---- interpreter ----

class EvalDepthGuard {
 public:
  explicit EvalDepthGuard(Interpreter& in) : in_(in) { ++in_.eval_depth_; }
  ~EvalDepthGuard() { --in_.eval_depth_; }
  bool exceeded() const { return in_.eval_depth_ > in_.limits_.max_eval_depth; }

 private:
  Interpreter& in_;
};

namespace {

// Restores the output buffer when a capture ends (also on errors).
class OutputSwap {
 public:
  OutputSwap(std::string*& slot, std::string* replacement) : slot_(slot), saved_(slot) {
    slot_ = replacement;
  }
  ~OutputSwap() { slot_ = saved_; }

 private:
  std::string*& slot_;
  std::string* saved_;
};

}  // namespace

Interpreter::Interpreter(const Program& program, const RenderLimits& limits, std::time_t now)
    : program_(program), limits_(limits), now_(now) {}

Result<std::string> Interpreter::render(ScopePtr globals) {
  auto root = std::make_shared<Scope>(std::move(globals));
  std::string out;
  out_ = &out;
  auto flow = exec_body(program_.body, root);
  out_ = nullptr;
  if (!flow.ok()) {
    if (raised_) return Error{flow.message()};
    SourceMap map(program_.source);
    return make_error(map.describe(error_pos_), ": ", flow.message());
  }
  return out;
}

Status Interpreter::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return make_error("template exceeded the step limit (", limits_.max_steps,
                      " evaluation steps): it loops too long");
  }
  return {};
}

Status Interpreter::check_size(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    return make_error("value of ", bytes, " bytes exceeds the size limit of ",
                      limits_.max_output_bytes, " bytes");
  }
  return charge(bytes / 64);
}

namespace {
constexpr uint64_t kWorkUnitsPerStep = 16;  // comparisons of single elements are cheap
}  // namespace

Status Interpreter::charge_operand(const Value& v) {
  if (v.is_string()) return charge(v.as_string().size() / 64);
  if (v.is_list()) return charge(v.as_list().items.size() / 16);
  if (v.is_dict()) return charge(v.as_dict().items.size() / 16);
  return {};
}

WorkMeter Interpreter::meter() const {
  WorkMeter m;
  m.budget = (limits_.max_steps - std::min(steps_, limits_.max_steps)) * kWorkUnitsPerStep;
  return m;
}

Status Interpreter::settle(const WorkMeter& m) {
  if (m.exhausted()) return charge(limits_.max_steps + 1);
  return charge(m.used / kWorkUnitsPerStep);
}

Error Interpreter::raise(std::string msg) {
  raised_ = true;
  return Error{std::move(msg)};
}

Result<Value> Interpreter::make_arena_namespace() {
  if (arena_.size() >= limits_.max_arena_objects) {
    return make_error("too many namespace()/macro objects (limit ", limits_.max_arena_objects, ")");
  }
  arena_.push_back(std::make_unique<NamespaceObject>());
  return Value::arena_object(arena_.back().get());
}

Result<Value> Interpreter::define_macro(const MacroStmt& m, const ScopePtr& scope) {
  if (arena_.size() >= limits_.max_arena_objects) {
    return make_error("too many namespace()/macro objects (limit ", limits_.max_arena_objects, ")");
  }
  arena_.push_back(std::make_unique<MacroObject>(&m, scope));
  return Value::arena_object(arena_.back().get());
}

Status Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return make_error("rendered output exceeds the limit of ", limits_.max_output_bytes, " bytes");
  }
  out_->append(text);
  return charge(text.size() / 64);
}

Status Interpreter::emit_value(const Value& v) {
  if (v.is_string()) return emit(v.as_string());
  size_t before = out_->size();
  Status st = append_str(*out_, v, limits_.max_output_bytes);
  if (!st.ok()) {
    return make_error("rendered output exceeds the limit of ", limits_.max_output_bytes, " bytes");
  }
  return charge((out_->size() - before) / 64);
}

Result<std::string> Interpreter::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  OutputSwap swap(out_, &buf);
  SLUICE_RETURN_IF_ERROR(exec_body(body, scope).status());
  return buf;
}

Status Interpreter::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope->set(t.name, v);
      return {};
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope->lookup(t.name);
      if (!ns || !ns->is_object() || ns->as_object()->kind() != Object::Kind::kNamespace) {
        return make_error("cannot assign attribute on non-namespace object");
      }
      static_cast<NamespaceObject*>(ns->as_object())->set(t.attr, v);
      return {};
    }
    case Target::Kind::kTuple: {
      SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(*this, v));
      size_t n = t.items.size();
      if (seq->items.size() < n) {
        return make_error("not enough values to unpack (expected ", n, ", got ", seq->items.size(),
                          ")");
      }
      if (seq->items.size() > n) return make_error("too many values to unpack (expected ", n, ")");
      for (size_t i = 0; i < n; ++i)
        SLUICE_RETURN_IF_ERROR(assign(t.items[i], seq->items[i], scope));
      return {};
    }
  }
  return {};
}

// ---- statements ----

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body, const ScopePtr& scope) {
  for (const StmtPtr& s : body) {
    SLUICE_ASSIGN_OR_RETURN(Flow f, exec(*s, scope));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& s, const ScopePtr& scope) {
  EvalDepthGuard guard(*this);
  if (guard.exceeded()) {
    return make_error("template nested too deeply (limit ", limits_.max_eval_depth,
                      " evaluation frames)");
  }
  SLUICE_RETURN_IF_ERROR(charge(1));
  auto note = [&](Status st) -> Result<Flow> {
    if (!st.ok()) {
      if (!error_pos_set_) error_pos_ = s.pos, error_pos_set_ = true;
      return st;
    }
    return Flow::kNormal;
  };
  switch (s.kind) {
    case StmtKind::kText:
      return note(emit(static_cast<const TextStmt&>(s).text));
    case StmtKind::kPrint:
      for (const ExprPtr& e : static_cast<const PrintStmt&>(s).exprs) {
        auto v = eval(*e, scope);
        if (!v.ok()) return note(v.status());
        SLUICE_RETURN_IF_ERROR(note(emit_value(*v)).status());
      }
      return Flow::kNormal;
    case StmtKind::kIf: {
      const auto& node = static_cast<const IfStmt&>(s);
      for (const auto& [test, body] : node.branches) {
        auto t = eval(*test, scope);
        if (!t.ok()) return note(t.status());
        if (truthy(*t)) return exec_body(body, scope);
      }
      return exec_body(node.else_body, scope);
    }
    case StmtKind::kFor:
      return exec_for(static_cast<const ForStmt&>(s), scope);
    case StmtKind::kSet: {
      const auto& node = static_cast<const SetStmt&>(s);
      auto v = eval(*node.value, scope);
      if (!v.ok()) return note(v.status());
      return note(assign(node.target, *v, scope));
    }
    case StmtKind::kSetBlock: {
      const auto& node = static_cast<const SetBlockStmt&>(s);
      auto text = capture(node.body, std::make_shared<Scope>(scope));
      if (!text.ok()) return text.status();
      Value v = Value::string(std::move(text).value());
      if (node.filter) {
        auto filtered = eval_filter(static_cast<const FilterExpr&>(*node.filter), scope, &v);
        if (!filtered.ok()) return note(filtered.status());
        v = std::move(filtered).value();
      }
      return note(assign(node.target, v, scope));
    }
    case StmtKind::kMacro: {
      const auto& node = static_cast<const MacroStmt&>(s);
      auto m = define_macro(node, scope);
      if (!m.ok()) return note(m.status());
      scope->set(node.name, *m);
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock:
      return note(exec_call_block(static_cast<const CallBlockStmt&>(s), scope));
    case StmtKind::kFilterBlock: {
      const auto& node = static_cast<const FilterBlockStmt&>(s);
      auto text = capture(node.body, std::make_shared<Scope>(scope));
      if (!text.ok()) return text.status();
      Value input = Value::string(std::move(text).value());
      auto v = eval_filter(static_cast<const FilterExpr&>(*node.filter), scope, &input);
      if (!v.ok()) return note(v.status());
      return note(emit_value(*v));
    }
    case StmtKind::kWith: {
      const auto& node = static_cast<const WithStmt&>(s);
      auto inner = std::make_shared<Scope>(scope);
      std::vector<Value> values;
      for (const auto& [target, expr] : node.assignments) {
        auto v = eval(*expr, scope);
        if (!v.ok()) return note(v.status());
        values.push_back(std::move(v).value());
      }
      for (size_t i = 0; i < values.size(); ++i) {
        SLUICE_RETURN_IF_ERROR(note(assign(node.assignments[i].first, values[i], inner)).status());
      }
      return exec_body(node.body, inner);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_for(const ForStmt& s, const ScopePtr& scope) {
  auto iterable = eval(*s.iter, scope);
  if (!iterable.ok()) return iterable.status();
  auto r = run_loop(s, scope, *iterable, 0, false);
  if (!r.ok()) {
    if (!error_pos_set_) error_pos_ = s.pos, error_pos_set_ = true;
    return r.status();
  }
  return Flow::kNormal;
}

Result<std::string> Interpreter::run_loop(const ForStmt& s, const ScopePtr& outer,
                                          const Value& iterable, int depth0, bool capture_output) {
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<const ListData> seq, iterate(*this, iterable));
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : seq->items) {
      SLUICE_RETURN_IF_ERROR(charge(1));
      auto test_scope = std::make_shared<Scope>(outer);
      SLUICE_RETURN_IF_ERROR(assign(s.target, item, test_scope));
      SLUICE_ASSIGN_OR_RETURN(Value keep, eval(*s.filter, test_scope));
      if (truthy(keep)) kept.push_back(item);
    }
    auto filtered = std::make_shared<ListData>();
    filtered->items = std::move(kept);
    filtered->depth = seq->depth;
    seq = std::move(filtered);
  }
  std::string buf;
  OutputSwap swap(out_, capture_output ? &buf : out_);
  auto loop = std::make_shared<LoopObject>(seq, &s, outer, depth0);
  Value loop_value = Value::object(loop);
  for (size_t i = 0; i < seq->items.size(); ++i) {
    SLUICE_RETURN_IF_ERROR(charge(1));
    loop->index0 = i;
    // Each iteration starts from the outer values again: a `set` in the body does not carry
    // over to the next iteration (Jinja re-binds loop-local names per iteration).
    auto loop_scope = std::make_shared<Scope>(outer);
    SLUICE_RETURN_IF_ERROR(assign(s.target, seq->items[i], loop_scope));
    loop_scope->set("loop", loop_value);
    SLUICE_ASSIGN_OR_RETURN(Flow f, exec_body(s.body, loop_scope));
    if (f == Flow::kBreak) break;
  }
  if (seq->items.empty() && !s.else_body.empty()) {
    SLUICE_RETURN_IF_ERROR(exec_body(s.else_body, std::make_shared<Scope>(outer)).status());
  }
  return buf;
}

Status Interpreter::exec_call_block(const CallBlockStmt& s, const ScopePtr& scope) {
  const auto& call = static_cast<const CallExpr&>(*s.call);
  SLUICE_ASSIGN_OR_RETURN(Value callee, eval(*call.callee, scope));
  CallArgs args;
  SLUICE_RETURN_IF_ERROR(eval_args(call.args, scope, args));
  // The caller only lives as long as this call (it cannot close a cycle: see jinja_value.h).
  args.kwargs.emplace_back("caller",
                           Value::object(std::make_shared<MacroObject>(&s.caller, scope)));
  SLUICE_ASSIGN_OR_RETURN(Value result, this->call(callee, args));
  return emit_value(result);
}

// ---- calls ----

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return Error{callee.undefined_message()};
  if (!callee.is_object() || !callee.as_object()->is_callable()) {
    return make_error("'", type_name(callee), "' object is not callable");
  }
  Object* o = callee.as_object();
  switch (o->kind()) {
    case Object::Kind::kMacro:
      return call_macro(*static_cast<MacroObject*>(o), args);
    case Object::Kind::kFunction:
      return static_cast<FunctionObject*>(o)->fn()(*this, args);
    case Object::Kind::kBoundMethod: {
      auto* m = static_cast<BoundMethodObject*>(o);
      return call_method(*this, m->self(), m->name(), args);
    }
    case Object::Kind::kLoop: {
      auto* loop = static_cast<LoopObject*>(o);
      if (!loop->node()->recursive) {
        return make_error("The loop must have the 'recursive' marker to be called recursively.");
      }
      if (args.args.size() != 1 || !args.kwargs.empty())
        return make_error("loop() takes exactly one argument");
      if (call_depth_ >= limits_.max_call_depth) {
        return make_error("maximum recursion depth exceeded (", limits_.max_call_depth,
                          " nested calls)");
      }
      ++call_depth_;
      auto r = run_loop(*loop->node(), loop->outer(), args.args[0], loop->depth0() + 1, true);
      --call_depth_;
      if (!r.ok()) return r.status();
      return Value::string(std::move(r).value());
    }
    case Object::Kind::kJoiner: {
      auto* j = static_cast<JoinerObject*>(o);
      if (!j->used) {
        j->used = true;
        return Value::string("");
      }
      return Value::string(j->sep);
    }
    default:
      return make_error("'", o->type_name(), "' object is not callable");
  }
}

Result<Value> Interpreter::call_macro(MacroObject& m, CallArgs& args) {
  const MacroStmt& node = m.node();
  if (call_depth_ >= limits_.max_call_depth) {
    return make_error("maximum recursion depth exceeded (", limits_.max_call_depth,
                      " nested calls, in macro '", node.name, "')");
  }
  auto scope = std::make_shared<Scope>(m.closure());
  size_t n = node.params.size();
  std::vector<std::pair<std::string, Value>> kwargs = std::move(args.kwargs);
  auto take_kwarg = [&](std::string_view name, Value* out) {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it->first == name) {
        *out = std::move(it->second);
        kwargs.erase(it);
        return true;
      }
    }
    return false;
  };
  std::vector<size_t> missing;
  for (size_t i = 0; i < n; ++i) {
    Value v;
    if (i < args.args.size()) {
      scope->set(node.params[i], args.args[i]);
    } else if (take_kwarg(node.params[i], &v)) {
      scope->set(node.params[i], std::move(v));
    } else {
      missing.push_back(i);
    }
  }
  auto is_param = [&](std::string_view name) {
    return std::find(node.params.begin(), node.params.end(), name) != node.params.end();
  };
  if (node.uses_caller && !is_param("caller")) {
    Value caller;
    if (!take_kwarg("caller", &caller)) caller = Value::undefined("No caller defined");
    scope->set("caller", std::move(caller));
  }
  if (node.uses_kwargs && !is_param("kwargs")) {
    DictData d;
    for (auto& [k, v] : kwargs) d.set(Value::string(k), std::move(v));
    scope->set("kwargs", make_dict(std::move(d)));
  } else if (!kwargs.empty()) {
    return make_error("macro '", node.name, "' takes no keyword argument '", kwargs.front().first,
                      "'");
  }
  if (node.uses_varargs && !is_param("varargs")) {
    std::vector<Value> extra;
    for (size_t i = n; i < args.args.size(); ++i) extra.push_back(args.args[i]);
    scope->set("varargs", Value::list(std::move(extra), ListKind::kTuple));
  } else if (args.args.size() > n) {
    return make_error("macro '", node.name, "' takes not more than ", n, " argument(s)");
  }
  ++call_depth_;
  struct DepthRestore {
    int& d;
    ~DepthRestore() { --d; }
  } restore{call_depth_};
  size_t first_default = n - node.defaults.size();
  for (size_t i : missing) {
    if (i >= first_default) {
      SLUICE_ASSIGN_OR_RETURN(Value d, eval(*node.defaults[i - first_default], scope));
      scope->set(node.params[i], std::move(d));
    } else {
      scope->set(node.params[i],
                 Value::undefined("parameter '" + node.params[i] + "' was not provided"));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::string text, capture(node.body, scope));
  return Value::string(std::move(text));
}

// ---- expressions ----

Status Interpreter::eval_args(const CallArgsExpr& a, const ScopePtr& scope, CallArgs& out) {
  out.args.reserve(a.args.size());
  for (const ExprPtr& e : a.args) {
    SLUICE_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    SLUICE_RETURN_IF_ERROR(charge_operand(v));
    out.args.push_back(std::move(v));
  }
  for (const auto& [k, e] : a.kwargs) {
    SLUICE_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    SLUICE_RETURN_IF_ERROR(charge_operand(v));
    out.kwargs.emplace_back(k, std::move(v));
  }
  return {};
}

Result<Value> Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  EvalDepthGuard guard(*this);
  Result<Value> r = Value();
  if (guard.exceeded()) {
    r = make_error("template nested too deeply (limit ", limits_.max_eval_depth,
                   " evaluation frames)");
  } else if (Status st = charge(1); !st.ok()) {
    r = st;
  } else {
    r = eval_inner(e, scope);
    if (r.ok() && r->depth() > kMaxValueDepth) {
      r = make_error("value nested deeper than ", kMaxValueDepth, " levels");
    }
  }
  if (!r.ok() && !error_pos_set_) {
    error_pos_ = e.pos;
    error_pos_set_ = true;
  }
  return r;
}

Result<Value> Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return static_cast<const ConstExpr&>(e).value;
    case ExprKind::kName: {
      const auto& name = static_cast<const NameExpr&>(e).name;
      if (const Value* v = scope->lookup(name)) return *v;
      return Value::undefined("'" + name + "' is undefined");
    }
    case ExprKind::kGetAttr: {
      const auto& node = static_cast<const GetAttrExpr&>(e);
      SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*node.object, scope));
      return get_attr(*this, obj, node.attr);
    }
    case ExprKind::kGetItem: {
      const auto& node = static_cast<const GetItemExpr&>(e);
      SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*node.object, scope));
      if (obj.is_string()) SLUICE_RETURN_IF_ERROR(charge_operand(obj));  // code point indexing
      if (node.key->kind == ExprKind::kSlice) {
        const auto& sl = static_cast<const SliceExpr&>(*node.key);
        Value parts[3];
        const ExprPtr* exprs[3] = {&sl.start, &sl.stop, &sl.step};
        for (int i = 0; i < 3; ++i) {
          if (*exprs[i]) {
            SLUICE_ASSIGN_OR_RETURN(parts[i], eval(**exprs[i], scope));
          } else {
            parts[i] = Value::none();
          }
        }
        return get_slice(*this, obj, parts[0], parts[1], parts[2]);
      }
      SLUICE_ASSIGN_OR_RETURN(Value key, eval(*node.key, scope));
      return get_item(*this, obj, key);
    }
    case ExprKind::kSlice:
      return make_error("slice outside of a subscript");
    case ExprKind::kCall:
      return eval_call(static_cast<const CallExpr&>(e), scope);
    case ExprKind::kFilter:
      return eval_filter(static_cast<const FilterExpr&>(e), scope, nullptr);
    case ExprKind::kTest:
      return eval_test(static_cast<const TestExpr&>(e), scope);
    case ExprKind::kUnary: {
      const auto& node = static_cast<const UnaryExpr&>(e);
      SLUICE_ASSIGN_OR_RETURN(Value v, eval(*node.operand, scope));
      if (node.op == UnaryOp::kNot) return Value::boolean(!truthy(v));
      return unary_op(node.op, v);
    }
    case ExprKind::kBinary: {
      const auto& node = static_cast<const BinaryExpr&>(e);
      SLUICE_ASSIGN_OR_RETURN(Value left, eval(*node.left, scope));
      if (node.op == BinaryOp::kAnd) return truthy(left) ? eval(*node.right, scope) : left;
      if (node.op == BinaryOp::kOr) return truthy(left) ? left : eval(*node.right, scope);
      SLUICE_ASSIGN_OR_RETURN(Value right, eval(*node.right, scope));
      SLUICE_RETURN_IF_ERROR(charge_operand(left));
      SLUICE_RETURN_IF_ERROR(charge_operand(right));
      return binary_op(*this, node.op, left, right);
    }
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e), scope);
    case ExprKind::kCondExpr: {
      const auto& node = static_cast<const CondExpr&>(e);
      SLUICE_ASSIGN_OR_RETURN(Value t, eval(*node.test, scope));
      if (truthy(t)) return eval(*node.then_expr, scope);
      if (node.else_expr) return eval(*node.else_expr, scope);
      SourceMap map(program_.source);
      return Value::undefined("the inline if-expression on line " +
                              std::to_string(map.line(e.pos)) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      const auto& node = static_cast<const ListExpr&>(e);
      std::vector<Value> items;
      items.reserve(node.items.size());
      for (const ExprPtr& item : node.items) {
        SLUICE_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items),
                         e.kind == ExprKind::kList ? ListKind::kList : ListKind::kTuple);
    }
    case ExprKind::kDict: {
      const auto& node = static_cast<const DictExpr&>(e);
      DictData d;
      for (const auto& [ke, ve] : node.items) {
        SLUICE_ASSIGN_OR_RETURN(Value k, eval(*ke, scope));
        WorkMeter m = meter();
        SLUICE_RETURN_IF_ERROR(hash_value(k, &m).status());
        SLUICE_ASSIGN_OR_RETURN(Value v, eval(*ve, scope));
        d.set(std::move(k), std::move(v), &m);
        SLUICE_RETURN_IF_ERROR(settle(m));
      }
      return make_dict(std::move(d));
    }
  }
  return make_error("unknown expression");
}

Result<Value> Interpreter::eval_call(const CallExpr& e, const ScopePtr& scope) {
  Value callee;
  if (e.callee->kind == ExprKind::kGetAttr) {
    // obj.method(...): call the method directly instead of building a bound method.
    const auto& ga = static_cast<const GetAttrExpr&>(*e.callee);
    SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*ga.object, scope));
    if (obj.is_undefined()) return Error{obj.undefined_message()};
    MethodKind kind = find_method(obj, ga.attr);
    if (kind == MethodKind::kUnsafe) return Error{unsafe_message(obj, ga.attr)};
    if (kind == MethodKind::kSafe) {
      SLUICE_RETURN_IF_ERROR(charge_operand(obj));
      CallArgs args;
      SLUICE_RETURN_IF_ERROR(eval_args(e.args, scope, args));
      return call_method(*this, obj, ga.attr, args);
    }
    SLUICE_ASSIGN_OR_RETURN(callee, get_attr(*this, obj, ga.attr));
  } else {
    SLUICE_ASSIGN_OR_RETURN(callee, eval(*e.callee, scope));
  }
  CallArgs args;
  SLUICE_RETURN_IF_ERROR(eval_args(e.args, scope, args));
  return call(callee, args);
}

Result<Value> Interpreter::eval_filter(const FilterExpr& e, const ScopePtr& scope,
                                       const Value* block_input) {
  Value operand;
  if (!e.operand) {
    if (!block_input) return make_error("filter without input");
    operand = *block_input;
  } else if (block_input && e.operand->kind == ExprKind::kFilter) {
    SLUICE_ASSIGN_OR_RETURN(
        operand, eval_filter(static_cast<const FilterExpr&>(*e.operand), scope, block_input));
  } else {
    SLUICE_ASSIGN_OR_RETURN(operand, eval(*e.operand, scope));
  }
  SLUICE_RETURN_IF_ERROR(charge_operand(operand));
  FilterFn fn = find_filter(e.name);
  if (!fn) return make_error("No filter named '", e.name, "'.");
  CallArgs args;
  SLUICE_RETURN_IF_ERROR(eval_args(e.args, scope, args));
  return fn(*this, operand, args);
}

Result<Value> Interpreter::eval_test(const TestExpr& e, const ScopePtr& scope) {
  SLUICE_ASSIGN_OR_RETURN(Value operand, eval(*e.operand, scope));
  SLUICE_RETURN_IF_ERROR(charge_operand(operand));
  TestFn fn = find_test(e.name);
  if (!fn) return make_error("No test named '", e.name, "'.");
  CallArgs args;
  SLUICE_RETURN_IF_ERROR(eval_args(e.args, scope, args));
  SLUICE_ASSIGN_OR_RETURN(bool r, fn(*this, operand, args));
  return Value::boolean(r);
}

Result<Value> Interpreter::eval_compare(const CompareExpr& e, const ScopePtr& scope) {
  SLUICE_ASSIGN_OR_RETURN(Value left, eval(*e.first, scope));
  for (const auto& [op, expr] : e.rest) {
    SLUICE_ASSIGN_OR_RETURN(Value right, eval(*expr, scope));
    SLUICE_ASSIGN_OR_RETURN(bool r, compare_op(*this, op, left, right));
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace sluice::jinja
