#include "router/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <utility>

namespace sluice::router {

struct PrefixTree::Node {
  std::string edge;  // bytes from the parent to this node (non-empty except at the root)
  Node* parent = nullptr;
  std::vector<std::unique_ptr<Node>> children;  // distinct first bytes
  uint64_t last = 0;                            // LRU stamp: >= every descendant's

  // The child whose edge starts with `c`, or children.end().
  std::vector<std::unique_ptr<Node>>::iterator child(char c) {
    return std::find_if(children.begin(), children.end(),
                        [c](const std::unique_ptr<Node>& n) { return n->edge[0] == c; });
  }
  const Node* find(char c) const {
    for (const auto& n : children)
      if (n->edge[0] == c) return n.get();
    return nullptr;
  }
};

namespace {

size_t common_prefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixTree::PrefixTree(size_t max_chars) : max_chars_(max_chars), root_(std::make_unique<Node>()) {}
PrefixTree::~PrefixTree() = default;
PrefixTree::PrefixTree(PrefixTree&&) noexcept = default;
PrefixTree& PrefixTree::operator=(PrefixTree&&) noexcept = default;

size_t PrefixTree::match(std::string_view key) const {
  const Node* n = root_.get();
  size_t d = 0;
  while (d < key.size()) {
    const Node* c = n->find(key[d]);
    if (!c) break;
    const size_t m = common_prefix(c->edge, key.substr(d));
    d += m;
    if (m < c->edge.size()) break;
    n = c;
  }
  return d;
}

void PrefixTree::insert(std::string_view key) {
  ++clock_;
  Node* n = root_.get();
  n->last = clock_;
  size_t d = 0;
  while (d < key.size()) {
    auto it = n->child(key[d]);
    if (it == n->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge = std::string(key.substr(d));
      leaf->parent = n;
      leaf->last = clock_;
      n_chars_ += leaf->edge.size();
      ++n_nodes_;
      n->children.push_back(std::move(leaf));
      break;
    }
    Node* c = it->get();
    const size_t m = common_prefix(c->edge, key.substr(d));
    if (m < c->edge.size()) {
      // Split c's edge at m:  n -"ab"-> c   becomes   n -"a"-> mid -"b"-> c
      auto mid = std::make_unique<Node>();
      mid->edge = c->edge.substr(0, m);
      mid->parent = n;
      c->edge.erase(0, m);
      c->parent = mid.get();
      mid->children.push_back(std::move(*it));
      *it = std::move(mid);
      c = it->get();
      ++n_nodes_;
    }
    c->last = clock_;
    d += m;
    n = c;
  }
  if (n_chars_ > max_chars_) evict_to(max_chars_ - max_chars_ / 8);
}

void PrefixTree::evict_to(size_t target) {
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get() && n->children.empty()) leaves.emplace(n->last, n);
    for (auto& c : n->children) stack.push_back(c.get());
  }
  while (n_chars_ > target && !leaves.empty()) {
    Node* leaf = leaves.top().second;
    leaves.pop();
    Node* parent = leaf->parent;
    n_chars_ -= leaf->edge.size();
    n_evicted_chars_ += leaf->edge.size();
    --n_nodes_;
    auto it = std::find_if(parent->children.begin(), parent->children.end(),
                           [leaf](const std::unique_ptr<Node>& c) { return c.get() == leaf; });
    std::swap(*it, parent->children.back());
    parent->children.pop_back();  // frees leaf
    if (parent != root_.get() && parent->children.empty()) leaves.emplace(parent->last, parent);
  }
}

void PrefixTree::drop_subtree(Node& n) {
  n_chars_ -= n.edge.size();
  --n_nodes_;
  for (auto& c : n.children) drop_subtree(*c);
}

void PrefixTree::trim(std::string_view key, size_t keep_chars) {
  Node* n = root_.get();
  size_t d = 0;  // bytes of key matched down to n
  while (d < key.size()) {
    auto it = n->child(key[d]);
    if (it == n->children.end()) return;
    Node* c = it->get();
    const size_t m = common_prefix(c->edge, key.substr(d));
    if (d + m <= keep_chars) {
      if (m < c->edge.size()) return;  // key leaves the tree before keep_chars
      d += m;
      n = c;
      continue;
    }
    // The cut falls inside c's edge (or at its start): keep keep_chars - d bytes of it.
    const size_t cut = keep_chars - d;
    if (cut == 0) {
      drop_subtree(*c);
      std::swap(*it, n->children.back());
      n->children.pop_back();
    } else {
      for (auto& g : c->children) drop_subtree(*g);
      c->children.clear();
      n_chars_ -= c->edge.size() - cut;
      c->edge.resize(cut);
    }
    return;
  }
}

void PrefixTree::clear() {
  root_ = std::make_unique<Node>();
  n_chars_ = 0;
  n_nodes_ = 0;
}

}  // namespace sluice::router
