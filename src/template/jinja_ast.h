// Syntax tree of a parsed chat template. Nodes are immutable after parsing and owned by the
// ChatTemplate; the interpreter walks them by `kind` (no virtual dispatch per node).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace sluice::jinja {

// ---- expressions ----

enum class ExprKind : uint8_t {
  kConst,
  kName,
  kGetAttr,
  kGetItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kCondExpr,
  kList,
  kTuple,
  kDict,
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
enum class UnaryOp : uint8_t { kNot, kNeg, kPos };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  Expr(ExprKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  uint32_t pos;  // byte offset in the normalized source
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(uint32_t p, Value v) : Expr(ExprKind::kConst, p), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(uint32_t p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};
struct GetAttrExpr : Expr {
  GetAttrExpr(uint32_t p, ExprPtr o, std::string a)
      : Expr(ExprKind::kGetAttr, p), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};
struct GetItemExpr : Expr {
  GetItemExpr(uint32_t p, ExprPtr o, ExprPtr k)
      : Expr(ExprKind::kGetItem, p), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;  // may be a SliceExpr
};
struct SliceExpr : Expr {
  explicit SliceExpr(uint32_t p) : Expr(ExprKind::kSlice, p) {}
  ExprPtr start, stop, step;  // each may be null
};

// Positional and keyword arguments of a call, filter or test.
struct CallArgsExpr {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};
struct CallExpr : Expr {
  CallExpr(uint32_t p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgsExpr args;
};
struct FilterExpr : Expr {
  FilterExpr(uint32_t p, ExprPtr o, std::string n)
      : Expr(ExprKind::kFilter, p), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;  // null inside {% filter %} / {% set x | f %}: the block's output is the operand
  std::string name;
  CallArgsExpr args;
};
struct TestExpr : Expr {
  TestExpr(uint32_t p, ExprPtr o, std::string n)
      : Expr(ExprKind::kTest, p), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  CallArgsExpr args;
};
struct UnaryExpr : Expr {
  UnaryExpr(uint32_t p, UnaryOp o, ExprPtr e)
      : Expr(ExprKind::kUnary, p), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};
struct BinaryExpr : Expr {
  BinaryExpr(uint32_t p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};
// a < b <= c: each operator compares neighbours, Python-style chaining.
struct CompareExpr : Expr {
  CompareExpr(uint32_t p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct CondExpr : Expr {
  explicit CondExpr(uint32_t p) : Expr(ExprKind::kCondExpr, p) {}
  ExprPtr test, then_expr, else_expr;  // else_expr may be null (-> Undefined)
};
struct ListExpr : Expr {  // also kTuple
  ListExpr(ExprKind k, uint32_t p) : Expr(k, p) {}
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  explicit DictExpr(uint32_t p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

// ---- assignment targets ----

// `x`, `a, (b, c)` or (in {% set %} only) `ns.attr`.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNamespaceAttr } kind = Kind::kName;
  std::string name;           // kName, and the namespace variable of kNamespaceAttr
  std::string attr;           // kNamespaceAttr
  std::vector<Target> items;  // kTuple
};

// ---- statements ----

enum class StmtKind : uint8_t {
  kText,
  kPrint,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kWith,
  kBreak,
  kContinue,
};

struct Stmt {
  Stmt(StmtKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  uint32_t pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(uint32_t p, std::string t) : Stmt(StmtKind::kText, p), text(std::move(t)) {}
  std::string text;
};
// {{ expr }}, or {% print a, b %} (each printed in turn; none is fine too).
struct PrintStmt : Stmt {
  explicit PrintStmt(uint32_t p) : Stmt(StmtKind::kPrint, p) {}
  std::vector<ExprPtr> exprs;
};
struct IfStmt : Stmt {
  explicit IfStmt(uint32_t p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body else_body;
};
struct ForStmt : Stmt {
  explicit ForStmt(uint32_t p) : Stmt(StmtKind::kFor, p) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in y if cond`; may be null
  bool recursive = false;
  Body body, else_body;
};
struct SetStmt : Stmt {
  explicit SetStmt(uint32_t p) : Stmt(StmtKind::kSet, p) {}
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(uint32_t p) : Stmt(StmtKind::kSetBlock, p) {}
  Target target;
  ExprPtr filter;  // FilterExpr chain with a null innermost operand; may be null
  Body body;
};
// A macro definition; also the `caller` of a {% call %} block.
struct MacroStmt : Stmt {
  explicit MacroStmt(uint32_t p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last defaults.size() params
  Body body;
  // Whether the body references these names (Jinja then accepts extra args / a caller).
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(uint32_t p) : Stmt(StmtKind::kCallBlock, p) {}
  ExprPtr call;         // a CallExpr
  MacroStmt caller{0};  // params + body of the block, named "caller"
};
struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(uint32_t p) : Stmt(StmtKind::kFilterBlock, p) {}
  ExprPtr filter;  // FilterExpr chain with a null innermost operand
  Body body;
};
struct WithStmt : Stmt {
  explicit WithStmt(uint32_t p) : Stmt(StmtKind::kWith, p) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};
struct LoopControlStmt : Stmt {  // kBreak / kContinue
  LoopControlStmt(StmtKind k, uint32_t p) : Stmt(k, p) {}
};

// A parsed template.
struct Program {
  std::string source;  // normalized source (positions index into it)
  Body body;
};

}  // namespace sluice::jinja
