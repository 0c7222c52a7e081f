// BPE merging as HF tokenizers' Word::merge_all: the heap pops the lowest (rank, position); a
// popped entry is stale when its left symbol was absorbed or the pair no longer maps to the same
// merged id. Words are cached per thread (words < 256 bytes, cache cleared when full).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "tokenizer/scratch.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

const std::array<char32_t, 256>& byte_level_chars() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? static_cast<char32_t>(b) : 256 + n++;
    return t;
  }();
  return table;
}

int byte_level_byte(char32_t c) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    const auto& t = byte_level_chars();
    for (int b = 0; b < 256; ++b) inv[t[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

void byte_level_encode(std::string_view raw, std::string& out) {
  const auto& t = byte_level_chars();
  for (unsigned char b : raw) utf8_append(out, t[b]);
}

bool byte_level_decode(std::string_view token, std::string& out) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    int b = byte_level_byte(utf8_next(token, i));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
  }
  out += bytes;
  return true;
}

namespace {
std::atomic<uint64_t> next_cache_owner{1};

// Per-thread cache of word → ids for one model at a time (the owner id says which).
class WordCache {
 public:
  static constexpr size_t kMaxWord = 256;
  static constexpr size_t kMaxBytes = size_t{1} << 20;  // keys and values together
  const int32_t* find(uint64_t owner, std::string_view word, size_t& n) {
    if (owner != owner_) reset(owner);
    uint64_t h = hash_bytes(word);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key_len == kEmpty) return nullptr;
      if (s.hash == h && s.key_len == word.size() &&
          std::string_view(keys_.data() + s.key_off, s.key_len) == word) {
        n = s.val_len;
        return values_.data() + s.val_off;
      }
    }
  }
  void insert(uint64_t owner, std::string_view word, const int32_t* ids, size_t n) {
    if (owner != owner_) reset(owner);
    if (size_ * 2 >= slots_.size() || keys_.size() + values_.size() * sizeof(int32_t) > kMaxBytes)
      reset(owner);
    uint64_t h = hash_bytes(word);
    size_t mask = slots_.size() - 1;
    size_t i = h & mask;
    while (slots_[i].key_len != kEmpty) i = (i + 1) & mask;
    slots_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                 static_cast<uint32_t>(values_.size()), static_cast<uint32_t>(n)};
    keys_.append(word);
    values_.insert(values_.end(), ids, ids + n);
    ++size_;
  }

 private:
  static constexpr uint32_t kEmpty = ~0u;
  struct Slot {
    uint64_t hash;
    uint32_t key_off, key_len, val_off, val_len;
  };
  void reset(uint64_t owner) {
    owner_ = owner;
    slots_.assign(1u << 16, Slot{0, 0, kEmpty, 0, 0});
    keys_.clear();
    values_.clear();
    size_ = 0;
  }
  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> values_;
  size_t size_ = 0;
};

WordCache& word_cache() {
  thread_local WordCache cache;
  return cache;
}

}  // namespace

void release_word_cache() { word_cache() = WordCache(); }

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool removed;
};

struct HeapEntry {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
// std heap is a max-heap: "less" means lower priority = higher (rank, pos).
inline bool heap_less(const HeapEntry& x, const HeapEntry& y) {
  return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
}
}  // namespace

void BpeModel::build(std::vector<std::pair<std::string, int32_t>> vocab,
                     const std::vector<std::pair<std::string, std::string>>& merges,
                     Options options, const std::string& where) {
  options_ = std::move(options);
  cache_owner_ = next_cache_owner.fetch_add(1);
  int32_t max_id = -1;
  for (auto& [tok, id] : vocab) {
    if (id < 0) fail("{}.vocab[{:?}]: negative id {}", where, tok, id);
    if (id >= int64_t(vocab.size()) + kMaxTokenIdHoles)
      fail("{}.vocab[{:?}]: id {} is far past the {} tokens of the vocabulary", where, tok, id,
           vocab.size());
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  present_.assign(tokens_.size(), 0);
  index_.reserve(vocab.size());
  auto key_of = [this](int32_t id) -> std::string_view { return tokens_[static_cast<size_t>(id)]; };
  for (auto& [tok, id] : vocab) {
    tokens_[static_cast<size_t>(id)] = std::move(tok);
    present_[static_cast<size_t>(id)] = 1;
  }
  for (size_t id = 0; id < tokens_.size(); ++id)
    if (present_[id]) index_.insert(tokens_[id], static_cast<int32_t>(id), key_of);

  if (options_.has_unk) unk_id_ = find(options_.unk_token);

  // Merges are resolved in batches: hash every string of the batch and prefetch its slot first,
  // so the random memory accesses of ~3 lookups per merge overlap (load time is dominated by
  // them for 150k+ merges).
  size_t prefix_len = options_.continuing_subword_prefix.size();
  merges_.reserve(merges.size());
  constexpr size_t kBatch = 32;
  std::array<std::string, kBatch> joined;
  std::array<uint64_t, kBatch * 3> hashes;
  std::array<int32_t, kBatch * 3> found;
  for (size_t base = 0; base < merges.size(); base += kBatch) {
    size_t n = std::min(kBatch, merges.size() - base);
    for (size_t k = 0; k < n; ++k) {
      const auto& [a, b] = merges[base + k];
      joined[k].assign(a);
      joined[k].append(b.size() >= prefix_len ? std::string_view(b).substr(prefix_len)
                                              : std::string_view(b));
      hashes[3 * k] = hash_bytes(a);
      hashes[3 * k + 1] = hash_bytes(b);
      hashes[3 * k + 2] = hash_bytes(joined[k]);
      for (int q = 0; q < 3; ++q) index_.prefetch(hashes[3 * k + q]);
    }
    for (size_t k = 0; k < n; ++k) {
      const auto& [a, b] = merges[base + k];
      found[3 * k] = index_.find_hashed(a, hashes[3 * k], key_of);
      found[3 * k + 1] = index_.find_hashed(b, hashes[3 * k + 1], key_of);
      found[3 * k + 2] = index_.find_hashed(joined[k], hashes[3 * k + 2], key_of);
      merges_.prefetch(pair_key(found[3 * k], found[3 * k + 1]));
    }
    for (size_t k = 0; k < n; ++k) {
      size_t rank = base + k;
      const auto& [a, b] = merges[rank];
      if (found[3 * k] < 0)
        fail("{}.merges[{}]: token {:?} is not in the vocabulary", where, rank, a);
      if (found[3 * k + 1] < 0)
        fail("{}.merges[{}]: token {:?} is not in the vocabulary", where, rank, b);
      if (found[3 * k + 2] < 0)
        fail("{}.merges[{}]: merged token {:?} is not in the vocabulary", where, rank, joined[k]);
      merges_.insert_or_assign(pair_key(found[3 * k], found[3 * k + 1]),
                               {static_cast<int32_t>(rank), found[3 * k + 2]});
    }
  }
}

void BpeModel::enable_byte_mode() {
  byte_mode_ = true;
  const auto& chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, chars[b]);
    byte_ids_[b] = find(s);
  }
}

int32_t BpeModel::find_input(std::string_view key) const {
  if (!byte_mode_) return find(key);
  // Whole-word lookups (ignore_merges) are rare enough to map the bytes back on the fly.
  thread_local std::string mapped;
  mapped.clear();
  byte_level_encode(key, mapped);
  return find(mapped);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    int32_t id = find_input(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() < WordCache::kMaxWord) {
    auto& cache = word_cache();
    size_t n = 0;
    if (const int32_t* hit = cache.find(cache_owner_, word, n)) {
      out.insert(out.end(), hit, hit + n);
      return;
    }
    size_t before = out.size();
    merge_word(word, out);
    cache.insert(cache_owner_, word, out.data() + before, out.size() - before);
    return;
  }
  merge_word(word, out);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<HeapEntry> heap;
  symbols.clear();
  heap.clear();
  auto add = [&](int32_t id) {
    int32_t pos = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, pos - 1, -1, false});
    if (pos > 0) symbols[static_cast<size_t>(pos - 1)].next = pos;
  };

  // HF's unk handling: consecutive unknown chars fuse into one unk when fuse_unk; a pending unk
  // is flushed before the next known char (but not before byte-fallback tokens).
  bool pending_unk = false;
  auto unknown = [&](std::string_view s) {
    if (options_.byte_fallback) {
      int32_t ids[64];
      size_t n = 0;
      bool ok = s.size() <= 64;
      for (size_t k = 0; ok && k < s.size(); ++k) {
        static const char* hex = "0123456789ABCDEF";
        auto b = static_cast<unsigned char>(s[k]);
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        int32_t id = find(std::string_view(name, 6));
        if (id < 0) ok = false;
        ids[n++] = id;
      }
      if (ok) {
        for (size_t k = 0; k < n; ++k) add(ids[k]);
        return;
      }
    }
    if (unk_id_ < 0) return;  // HF drops the char when there is no unk token
    if (pending_unk && !options_.fuse_unk) add(unk_id_);
    pending_unk = true;
  };
  auto known = [&](int32_t id) {
    if (pending_unk) {
      add(unk_id_);
      pending_unk = false;
    }
    add(id);
  };

  if (byte_mode_) {
    const auto& chars = byte_level_chars();
    for (unsigned char b : word) {
      int32_t id = byte_ids_[b];
      if (id >= 0) {
        known(id);
      } else {
        std::string s;
        utf8_append(s, chars[b]);
        unknown(s);
      }
    }
  } else {
    const auto& prefix = options_.continuing_subword_prefix;
    const auto& suffix = options_.end_of_word_suffix;
    std::string s;
    size_t i = 0;
    while (i < word.size()) {
      size_t start = i;
      i += static_cast<size_t>(utf8_len(static_cast<unsigned char>(word[i])));
      if (i > word.size()) i = word.size();
      std::string_view ch = word.substr(start, i - start);
      std::string_view key = ch;
      if ((start > 0 && !prefix.empty()) || (i == word.size() && !suffix.empty())) {
        s.clear();
        if (start > 0) s += prefix;
        s += ch;
        if (i == word.size()) s += suffix;
        key = s;
      }
      int32_t id = find(key);
      if (id >= 0) {
        known(id);
      } else {
        unknown(key);
      }
    }
  }
  if (pending_unk) add(unk_id_);

  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const auto* m = merges_.find(pair_key(symbols[k].id, symbols[k + 1].id)))
      heap.push_back({m->a, static_cast<int32_t>(k), m->b});
  }
  std::make_heap(heap.begin(), heap.end(), heap_less);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_less);
    HeapEntry top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const auto* m = merges_.find(pair_key(left.id, right.id));
    if (!m || m->b != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) {
      const Symbol& p = symbols[static_cast<size_t>(left.prev)];
      if (const auto* pm = merges_.find(pair_key(p.id, left.id))) {
        heap.push_back({pm->a, left.prev, pm->b});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
    if (left.next >= 0) {
      const Symbol& n = symbols[static_cast<size_t>(left.next)];
      if (const auto* nm = merges_.find(pair_key(left.id, n.id))) {
        heap.push_back({nm->a, top.pos, nm->b});
        std::push_heap(heap.begin(), heap.end(), heap_less);
      }
    }
  }
  for (const Symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
  release_if_large(symbols);
  release_if_large(heap);
}

}  // namespace hearth::tok
