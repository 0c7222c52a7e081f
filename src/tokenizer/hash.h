// Small open-addressing hash tables for the tokenizer's hot lookups: string → id (vocabulary),
// u64 → pair of ints (BPE merges keyed by (left id, right id), trie edges). Power-of-two
// capacity, linear probing, load factor ≤ 0.5; no deletion (tables are built once at load).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tok {

inline uint64_t hash_mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
  return hash_mix(h);
}

inline size_t table_capacity_for(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  return cap;
}

// Maps strings (stored elsewhere, reached through `key_of(id)`) to int32 ids.
class StringIdMap {
 public:
  void reserve(size_t n) { slots_.assign(table_capacity_for(n), Slot{0, -1}); }
  template <typename KeyOf>
  bool insert(std::string_view key, int32_t id, KeyOf key_of) {  // false if already present
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2, key_of);
    uint64_t h = hash_bytes(key);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      if (slots_[i].id < 0) {
        slots_[i] = {h, id};
        ++size_;
        return true;
      }
      if (slots_[i].hash == h && key_of(slots_[i].id) == key) return false;
    }
  }
  template <typename KeyOf>
  int32_t find(std::string_view key, KeyOf key_of) const {
    return find_hashed(key, hash_bytes(key), key_of);
  }
  // Hint for batched lookups (loading): fetch the slot for hash `h` into cache.
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & (slots_.size() - 1)]);
  }
  template <typename KeyOf>
  int32_t find_hashed(std::string_view key, uint64_t h, KeyOf key_of) const {
    if (slots_.empty()) return -1;
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      if (slots_[i].id < 0) return -1;
      if (slots_[i].hash == h && key_of(slots_[i].id) == key) return slots_[i].id;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash;
    int32_t id;
  };
  template <typename KeyOf>
  void rehash(size_t cap, KeyOf) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap < 16 ? 16 : cap, Slot{0, -1});
    size_t mask = slots_.size() - 1;
    for (auto& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & mask;
      while (slots_[i].id >= 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// Maps u64 keys (never ~0) to a pair of int32 values; insert overwrites.
class U64Map {
 public:
  struct Value {
    int32_t a;
    int32_t b;
  };
  void reserve(size_t n) { slots_.assign(table_capacity_for(n), Slot{kEmpty, {0, 0}}); }
  void insert_or_assign(uint64_t key, Value v) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_mix(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {key, v};
        ++size_;
        return;
      }
      if (slots_[i].key == key) {
        slots_[i].value = v;
        return;
      }
    }
  }
  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash_mix(key) & (slots_.size() - 1)]);
  }
  const Value* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_mix(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  struct Slot {
    uint64_t key;
    Value value;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{kEmpty, {0, 0}});
    size_ = 0;
    for (auto& s : old)
      if (s.key != kEmpty) insert_or_assign(s.key, s.value);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace hearth::tok
