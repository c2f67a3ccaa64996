// Tree-walking interpreter for parsed chat templates, plus the interpreter objects
// (scopes, macros, loop contexts, built-in functions) that filters and methods share.
//
// Scoping follows Jinja: every loop iteration, macro call, `with`, `filter` and `set` block
// opens a scope; `if` does not. Assignments go to the innermost scope and lookups walk
// outwards, so a `set` inside a loop body lasts until the end of that iteration only
// (templates carry state across iterations with namespace()).
// Macros see the scope they were defined in (lexical), at call time.
//
// Untrusted templates are bounded by RenderLimits: every expression/statement evaluated and
// every loop iteration costs a step (size-proportional work like list concatenation costs
// more), output and every built value are capped in bytes, and recursion is capped.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_value.h"

namespace sluice::jinja {

struct RenderLimits {
  uint64_t max_steps = 10'000'000;      // evaluation steps per render
  size_t max_output_bytes = 64u << 20;  // rendered text, and any single built value
  int max_call_depth = 64;              // nested macro / caller() / recursive loop calls
  int max_eval_depth = 768;             // nested evaluation frames (bounds C++ stack use)
  size_t max_arena_objects = 100'000;   // namespace() objects and macro definitions
};

// Evaluated positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  const Value* kwarg(std::string_view name) const;
};

// Python-style parameter binding for built-ins: fills `out[i]` for names[i] from positional
// then keyword arguments (nullptr when not given). Errors like Python's TypeError.
Status bind_args(std::string_view fn, const CallArgs& a,
                 std::initializer_list<std::string_view> names, std::vector<const Value*>& out);

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(std::string_view name) const;
  void set(std::string_view name, Value v);

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter;
using BuiltinFn = Result<Value> (*)(Interpreter&, CallArgs&);

// A macro, or the `caller` of a {% call %} block. A {% macro %} is arena-owned: it holds its
// defining scope, which holds the macro. A caller is refcounted: it lives in the called
// macro's scope, which its own captured scope never holds.
class MacroObject final : public Object {
 public:
  MacroObject(const MacroStmt* node, ScopePtr closure)
      : Object(Kind::kMacro), node_(node), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string module() const override { return "jinja2.runtime"; }
  std::string repr() const override;
  const MacroStmt& node() const { return *node_; }
  const ScopePtr& closure() const { return closure_; }

 private:
  const MacroStmt* node_;
  ScopePtr closure_;
};

// A global function such as range() or namespace().
class FunctionObject final : public Object {
 public:
  FunctionObject(std::string name, std::string repr, BuiltinFn fn)
      : Object(Kind::kFunction), name_(std::move(name)), repr_(std::move(repr)), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return repr_; }
  const std::string& name() const { return name_; }
  BuiltinFn fn() const { return fn_; }

 private:
  std::string name_;
  std::string repr_;
  BuiltinFn fn_;
};

// `x.method` taken without calling it right away.
class BoundMethodObject final : public Object {
 public:
  BoundMethodObject(Value self, std::string name)
      : Object(Kind::kBoundMethod), self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override;
  const Value& self() const { return self_; }
  const std::string& name() const { return name_; }

 private:
  Value self_;
  std::string name_;
};

// jinja2.runtime.LoopContext: the `loop` variable.
class LoopObject final : public Object {
 public:
  LoopObject(std::shared_ptr<const ListData> items, const ForStmt* node, ScopePtr outer, int depth0)
      : Object(Kind::kLoop),
        items_(std::move(items)),
        node_(node),
        outer_(std::move(outer)),
        depth0_(depth0) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string module() const override { return "jinja2.runtime"; }
  std::string repr() const override;
  bool truthy() const override { return !items_->items.empty(); }

  // Attribute lookup (index, first, previtem, ...); nullopt-like Undefined when unknown.
  bool attr(std::string_view name, Value* out) const;
  size_t index0 = 0;
  Value changed_last;
  bool changed_seen = false;
  const ForStmt* node() const { return node_; }
  const ScopePtr& outer() const { return outer_; }
  int depth0() const { return depth0_; }
  const std::vector<Value>& items() const { return items_->items; }

 private:
  std::shared_ptr<const ListData> items_;
  const ForStmt* node_;
  ScopePtr outer_;
  int depth0_;
};

// cycler(...) and joiner(sep) globals.
class CyclerObject final : public Object {
 public:
  explicit CyclerObject(std::vector<Value> items)
      : Object(Kind::kCycler), items(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::string module() const override { return "jinja2.utils"; }
  std::string repr() const override { return "<jinja2.utils.Cycler object>"; }
  std::vector<Value> items;
  size_t pos = 0;
};
class JoinerObject final : public Object {
 public:
  explicit JoinerObject(std::string sep) : Object(Kind::kJoiner), sep(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  std::string module() const override { return "jinja2.utils"; }
  std::string repr() const override { return "<jinja2.utils.Joiner object>"; }
  std::string sep;
  bool used = false;
};

// Renders one program once: it owns that render's arena, budget and output buffers.
class Interpreter {
 public:
  Interpreter(const Program& program, const RenderLimits& limits, std::time_t now);
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the program with `globals` (context variables and global functions) as the
  // outermost scope.
  Result<std::string> render(ScopePtr globals);

  // ---- services for filters, methods and built-ins ----

  // Spends evaluation steps; an error once the budget is gone.
  Status charge(uint64_t steps);
  // Charges for producing `bytes` of data and checks the single-value size cap.
  Status check_size(size_t bytes);
  // Charges for the O(size) work an operation on `v` may do (string bytes, list/dict items).
  Status charge_operand(const Value& v);
  // A meter for recursive comparisons/hashing holding the remaining step budget, and the
  // charge for what it used (the step-limit error once it ran out).
  WorkMeter meter() const;
  Status settle(const WorkMeter& m);
  size_t max_size() const { return limits_.max_output_bytes; }
  // A new namespace() object, owned by this render's arena.
  Result<Value> make_arena_namespace();
  Result<Value> call(const Value& callee, CallArgs& args);
  std::time_t now() const { return now_; }
  // raise_exception(msg): the render fails with exactly `msg`.
  Error raise(std::string msg);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  friend class EvalDepthGuard;

  Result<Flow> exec_body(const Body& body, const ScopePtr& scope);
  Result<Flow> exec(const Stmt& s, const ScopePtr& scope);
  Result<Flow> exec_for(const ForStmt& s, const ScopePtr& scope);
  Result<std::string> run_loop(const ForStmt& s, const ScopePtr& outer, const Value& iterable,
                               int depth0, bool capture);
  Status exec_call_block(const CallBlockStmt& s, const ScopePtr& scope);
  Result<std::string> capture(const Body& body, const ScopePtr& scope);
  Status assign(const Target& t, const Value& v, const ScopePtr& scope);
  Status emit(std::string_view text);
  Status emit_value(const Value& v);

  Result<Value> eval(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_inner(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_call(const CallExpr& e, const ScopePtr& scope);
  Result<Value> eval_filter(const FilterExpr& e, const ScopePtr& scope, const Value* block_input);
  Result<Value> eval_test(const TestExpr& e, const ScopePtr& scope);
  Result<Value> eval_compare(const CompareExpr& e, const ScopePtr& scope);
  Status eval_args(const CallArgsExpr& a, const ScopePtr& scope, CallArgs& out);
  Result<Value> call_macro(MacroObject& m, CallArgs& args);
  Result<Value> define_macro(const MacroStmt& m, const ScopePtr& scope);

  const Program& program_;
  RenderLimits limits_;
  std::time_t now_;
  uint64_t steps_ = 0;
  int eval_depth_ = 0;
  int call_depth_ = 0;
  std::string* out_ = nullptr;
  uint32_t error_pos_ = 0;  // source position of the innermost node that failed
  bool error_pos_set_ = false;
  bool raised_ = false;  // the error came from raise_exception()
  std::vector<std::unique_ptr<Object>> arena_;
};

}  // namespace sluice::jinja
