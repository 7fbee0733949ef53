// A small least-recently-used map with a fixed capacity (the encoders' prompt, vision-metadata and
// text-embedding caches). Not thread-safe: each user is a serial stage.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace wam {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The cached value, marked most recently used; null on a miss.
  const Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return &it->second->second;
  }

  // Inserts (or replaces) `key`, evicting the least recently used entry when full.
  const Value& insert(const Key& key, Value value) {
    if (auto it = index_.find(key); it != index_.end()) {
      entries_.erase(it->second);
      index_.erase(it);
    }
    if (entries_.size() == capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    entries_.emplace_front(key, std::move(value));
    index_.emplace(key, entries_.begin());
    return entries_.front().second;
  }

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;  // most recently used first
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace wam
