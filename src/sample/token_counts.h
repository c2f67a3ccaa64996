// TokenCounts: token id -> occurrence count, for penalties. Exists because a dense count
// array per request costs 4 bytes * n_vocab (0.5 MiB at 128k) times every running request,
// while a request touches a few thousand distinct ids; a node-based std::unordered_map would
// allocate on every new id. Open addressing with linear probing, load <= 1/2, deletion by
// backward shift (no tombstones), so iteration visits only live entries' slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace sluice {

class TokenCounts {
 public:
  struct Entry {
    int32_t id;
    int32_t count;
  };
  static constexpr int32_t kEmpty = std::numeric_limits<int32_t>::min();

  TokenCounts() { slots_.assign(16, Entry{kEmpty, 0}); }

  // Adds `delta` (may be negative) to the count of `id` (>= 0); an entry reaching 0 is removed.
  void add(int32_t id, int32_t delta) {
    size_t i = find_slot(id);
    if (slots_[i].id == id) {
      slots_[i].count += delta;
      if (slots_[i].count == 0) erase_at(i);
      return;
    }
    if (delta == 0) return;
    if (2 * (size_ + 1) > slots_.size()) {
      grow();
      i = find_slot(id);
    }
    slots_[i] = Entry{id, delta};
    ++size_;
  }

  int32_t count(int32_t id) const {
    const size_t i = find_slot(id);
    return slots_[i].id == id ? slots_[i].count : 0;
  }

  size_t size() const { return size_; }
  void clear() {
    for (Entry& e : slots_) e = Entry{kEmpty, 0};
    size_ = 0;
  }

  // f(id, count) for every entry, in slot order. Cost: O(capacity) = O(2 * largest size).
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : slots_) {
      if (e.id != kEmpty) f(e.id, e.count);
    }
  }

 private:
  size_t mask() const { return slots_.size() - 1; }
  size_t home(int32_t id) const {
    // Fibonacci hashing: consecutive ids spread over the table.
    return static_cast<size_t>(
               (static_cast<uint64_t>(static_cast<uint32_t>(id)) * 0x9E3779B97F4A7C15ull) >> 32) &
           mask();
  }
  // The slot holding `id`, or the empty slot where it would go.
  size_t find_slot(int32_t id) const {
    size_t i = home(id);
    while (slots_[i].id != kEmpty && slots_[i].id != id) i = (i + 1) & mask();
    return i;
  }
  void erase_at(size_t i) {
    // Backward-shift deletion: pull later members of the probe run into the hole whenever
    // their home slot is not cyclically inside (hole, j].
    size_t hole = i;
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask();
      if (slots_[j].id == kEmpty) break;
      const size_t h = home(slots_[j].id);
      const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Entry{kEmpty, 0};
    --size_;
  }
  void grow() {
    std::vector<Entry> old(slots_.size() * 2, Entry{kEmpty, 0});
    old.swap(slots_);
    for (const Entry& e : old) {
      if (e.id != kEmpty) slots_[find_slot(e.id)] = e;
    }
  }

  std::vector<Entry> slots_;  // [capacity], capacity a power of two
  size_t size_ = 0;
};

}  // namespace sluice
